"""Run folders that explain themselves: plots drawn from real-shaped records, none without data,
and an index.md listing exactly what is there."""

import json
import re

import pytest
from swefleet.evals.plots import figure, plot_step_times, zero_based
from swefleet.evals.plots_train import kl_plot, reward_plot, reward_se_band
from swefleet.evals.run_index import INDEX, UNKNOWN
from swefleet.evals.run_report import run_kind, write_run_report

from tests.unit.evals_bench_fixture import write_bench
from tests.unit.run_folder_fixture import (
    REWARDS,
    step_record,
    trainer_record,
    write_demo,
    write_eval,
    write_rl,
    write_sft,
)

pytestmark = pytest.mark.unit
PNG = b"\x89PNG\r\n\x1a\n"
RL_PLOTS = {"reward.png", "loss.png", "kl.png", "entropy.png", "step_time.png", "drop_rate.png"}


def _pngs(folder) -> set[str]:
    return {p.name for p in folder.glob("*.png")}


def _index_rows(folder) -> dict[str, str]:
    """file -> description, from the index's table."""
    text = (folder / INDEX).read_text()
    return dict(re.findall(r"^\| `([^`]+)` \| (.*) \|$", text, re.MULTILINE))


def _entries(folder) -> set[str]:
    return {p.name + ("/" if p.is_dir() else "") for p in folder.iterdir() if p.name != INDEX}


def test_an_rl_folder_gets_every_plot_and_an_index_of_exactly_its_files(tmp_path):
    run = write_rl(tmp_path / "run")
    (run / "notes.txt").write_text("mine")
    plots = write_run_report(run)
    assert {p.name for p in plots if p.written} == RL_PLOTS == _pngs(run)
    assert all((run / name).read_bytes()[:8] == PNG for name in RL_PLOTS)
    rows = _index_rows(run)
    assert set(rows) == _entries(run)
    assert rows["reward.png"].startswith("plot: ")
    assert "per optimizer step" in rows["trainer_metrics.jsonl"]
    assert rows["notes.txt"] == UNKNOWN
    assert "not drawn" not in (run / INDEX).read_text()


def test_no_data_no_chart_and_the_index_says_why(tmp_path):
    run = write_rl(tmp_path / "run", trainer=[])
    (run / "loss.png").write_bytes(PNG)  # drawn by an earlier report: must not outlive its data
    plots = {p.name: p for p in write_run_report(run)}
    assert _pngs(run) == {"reward.png", "step_time.png", "drop_rate.png"}
    for name in ("loss.png", "kl.png", "entropy.png"):
        assert not plots[name].written and "trainer_metrics.jsonl" in plots[name].missing
        assert f"- `{name}`" in (run / INDEX).read_text()
    assert set(_index_rows(run)) == _entries(run)


def test_the_kl_plot_draws_whichever_kl_keys_the_trainer_writes(tmp_path):
    cases = {("mismatch_kl", "staleness_kl"): True, ("staleness_kl",): True, (): False}
    for keys, drawn in cases.items():
        kl = kl_plot([trainer_record(s, 0.1, kl_keys=keys) for s in range(2)], tmp_path)
        assert kl.written is drawn and (tmp_path / "kl.png").exists() is drawn, keys


def test_an_sft_folder_gets_its_loss_plot(tmp_path):
    sft = write_sft(tmp_path / "sft")
    assert run_kind(sft) == "sft"
    assert [p.name for p in write_run_report(sft) if p.written] == ["loss.png"]
    assert _pngs(sft) == {"loss.png"}
    assert set(_index_rows(sft)) == _entries(sft)


def test_an_eval_folder_gets_success_by_task_and_pass_at_k(tmp_path):
    ev = write_eval(tmp_path / "ev", {"a": [True, False], "b": [False, None], "c": [None]})
    assert run_kind(ev) == "eval"
    write_run_report(ev)
    assert _pngs(ev) == {"success_by_task.png", "pass_at_k.png"}
    rows = _index_rows(ev)
    assert set(rows) == _entries(ev) and "95%" in rows["success_by_task.png"]
    assert "SWE-bench" in rows["runs__demo__weights__v000003.r1.json"]


def test_an_eval_without_a_verdict_or_with_one_attempt_draws_no_empty_chart(tmp_path):
    ev = write_eval(tmp_path / "infra", {"a": [None, None]})
    plots = {p.name: p for p in write_run_report(ev)}
    assert _pngs(ev) == set()
    assert "no scored attempt" in plots["success_by_task.png"].missing
    one = write_eval(tmp_path / "k1", {"a": [True], "b": [False]})
    write_run_report(one)
    assert _pngs(one) == {"success_by_task.png"}  # pass@1 is the success rate
    assert "fewer than two values of k" in (one / INDEX).read_text()


def test_a_demo_folder_is_drawn_with_its_stages(tmp_path):
    demo = write_demo(tmp_path / "demo")
    write_run_report(demo)
    rows = _index_rows(demo)
    assert set(rows) == _entries(demo)
    assert "SFT" in rows["sft/"] and "eval" in rows["eval-heldout/"]
    assert _pngs(demo) == RL_PLOTS | {"p_demonstrations.png"}
    assert _pngs(demo / "sft") == {"loss.png"}
    # held out, every attempt failed: still a chart with what was measured (0/2 and intervals)
    assert _pngs(demo / "eval-heldout") == {"success_by_task.png", "pass_at_k.png"}
    for stage in (demo / "sft", demo / "eval-heldout"):
        assert set(_index_rows(stage)) == _entries(stage)


def test_a_folder_that_is_no_run_folder_is_bad_input(tmp_path):
    with pytest.raises(ValueError, match="not a run folder"):
        write_run_report(tmp_path)
    with pytest.raises(ValueError, match="not a run folder"):
        write_run_report(tmp_path / "missing")
    ev = write_eval(tmp_path / "ev", {"a": [True]})
    (ev / "report.json").write_text(json.dumps({"schema": "something else"}))
    with pytest.raises(ValueError, match="not an eval report"):
        write_run_report(ev)


def test_axes_include_zero_so_jitter_is_not_blown_up():
    _, ax = figure()
    zero_based(ax, [8.0, 8.2, 8.1])
    assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] >= 8.2
    zero_based(ax, [0.1, 0.2], rate=True)
    assert ax.get_ylim()[0] == 0 and ax.get_ylim()[1] >= 1.0
    zero_based(ax, [-0.3, 0.1])
    assert ax.get_ylim()[0] < -0.3 and ax.get_ylim()[1] >= 0.1


def test_bench_step_time_plot_starts_at_zero_and_names_no_folder(tmp_path):
    from swefleet.evals.bench_outputs import write_bench_outputs

    report = write_bench_outputs(write_bench(tmp_path / "b"), plots=False)
    fig = plot_step_times(report, tmp_path / "step_time.png")
    ax = fig.axes[0]
    assert ax.get_ylim()[0] == 0
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert labels[:3] == ["run 1 of 3", "run 2 of 3", "run 3 of 3"]
    assert not any("run-" in label for label in labels)


def test_the_reward_band_is_one_standard_error_of_each_steps_rewards():
    records = [
        {"step": 0, "rollout/reward_mean": 0.5, "rollout/reward_std": 0.4, "rollout/reward_n": 4},
        {"step": 1, "rollout/reward_mean": 0.25, "rollout/reward_std": 0.0, "rollout/reward_n": 1},
        {"step": 2, "rollout/reward_mean": 0.5, "rollout/episodes": 8},  # std not recorded
        {"step": 3, "rollout/reward_mean": 1.0, "rollout/reward_std": 0.0, "rollout/reward_n": 8},
    ]
    band = reward_se_band(records)
    assert list(band.xs) == [0, 3]  # one scored episode, or no std: no band
    assert band.lows == pytest.approx([0.3, 1.0]) and band.highs == pytest.approx([0.7, 1.0])


def test_the_reward_plot_draws_the_mean_with_its_band(tmp_path):
    records = [step_record(s, r) for s, r in enumerate(REWARDS)]
    band = reward_se_band(records)
    se = (0.25 * 0.75 * 8 / 7) ** 0.5 / 8 ** 0.5  # the fixture's std of 8 rewards, 2 of them 1
    assert band.highs[0] - band.lows[0] == pytest.approx(2 * se)
    plot = reward_plot(records, tmp_path)
    assert plot.written and "standard-error band" in plot.about
    assert (tmp_path / "reward.png").read_bytes()[:8] == PNG
