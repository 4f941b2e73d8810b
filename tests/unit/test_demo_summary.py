"""The demo's summary: the reward trend's arithmetic and the saved table."""

import json

import pytest

from swefleet.app.demo import reward_trend, summary_rows, write_demo_summary

pytestmark = pytest.mark.unit


def _steps(*rewards: float, n: int = 64) -> list[dict]:
    return [{"rollout/reward_mean": r, "rollout/episodes": n} for r in rewards]


def test_trend_pools_episodes_and_gives_the_binomial_standard_error():
    trend = reward_trend(_steps(0.2, 0.2, 0.2, 0.2, 0.2, 0.9, 0.5, 0.5, 0.5, 0.5, 0.5))
    assert trend["first"] == pytest.approx(0.2) and trend["last"] == pytest.approx(0.5)
    se = ((0.2 * 0.8 + 0.5 * 0.5) / 320) ** 0.5  # 5 steps x 64 episodes a window
    assert trend["se"] == pytest.approx(se) and trend["z"] == pytest.approx(0.3 / se)


def test_trend_weighs_steps_by_their_episodes_and_needs_two_windows():
    trend = reward_trend(_steps(0.0, 1.0, n=1) + _steps(0.0, 0.0, 0.0, n=3)
                         + _steps(1.0, 1.0, 1.0, 1.0, 1.0, n=2), window=5)
    assert trend["first"] == pytest.approx(1 / 11)  # (0 + 1 + 0 + 0 + 0) / (1 + 1 + 3 + 3 + 3)
    assert reward_trend(_steps(0.1) * 9) is None


def test_summary_is_saved_as_json_and_markdown(tmp_path):
    summary = {"run": str(tmp_path), "times_s": {"sft": 10.0, "rl": 100.0, "eval": 20.0},
               "sft": {"steps": 70, "loss_first": 6.9, "loss_last": 0.01},
               "rl": {"split": "train", "reward_per_step": [0.25] * 10,
                      "trend": reward_trend(_steps(*[0.25] * 10)),
                      "p_demonstrations": {"sft": 0.23, "rl": 0.39}},
               "eval": {"split": "heldout", "k": 2, "success_rate": 0.0, "ci95": [0.0, 0.0],
                        "n_episodes": 6, "n_tasks": 3}}
    write_demo_summary(tmp_path, summary)
    assert json.loads((tmp_path / "demo_summary.json").read_text()) == summary
    md = (tmp_path / "demo_summary.md").read_text()
    assert md.count("\n| ") == len(summary_rows(summary)) + 1  # header + one line per row
    assert "P(demonstrations) sft 0.23 -> rl 0.39" in md and "total 130 s" in md
    assert "(diff +0.000, SE 0.034, z 0.0)" in md


def test_an_eval_over_two_splits_shows_each_split_on_its_own_row():
    per_split = {"heldout": {"success_rate": 0.1, "ci95": [0.02, 0.3], "n_episodes": 20},
                 "heldout_instance": {"success_rate": 0.5, "ci95": [0.3, 0.7], "n_episodes": 24}}
    summary = {"times_s": {"eval": 5.0}, "rl": {"split": "train", "reward_per_step": [0.5]},
               "eval": {"split": "heldout,heldout_instance", "k": 2, "success_rate": 0.32,
                        "ci95": [0.2, 0.45], "n_episodes": 44, "n_tasks": 22,
                        "per_split": per_split}}
    rows = [r[1] for r in summary_rows(summary)]
    assert "split heldout: success 0.10 (95% CI 0.02-0.30) over 20 episodes" in rows
    assert "split heldout_instance: success 0.50 (95% CI 0.30-0.70) over 24 episodes" in rows
