"""Step metrics on a hand-made batch, against the definitions in docs/metrics.md."""

import pytest
from swefleet.orchestrator.metrics import cost_metrics, rollout_metrics

from swefleet.types import EpisodeStatus, Trajectory, Turn

pytestmark = pytest.mark.unit


def _traj(versions, status, reward, total):
    turns = [Turn(prompt_ids=[1], completion_ids=[2, 3], logprobs=[-1.0, -1.0], policy_version=v)
             for v in versions]
    return Trajectory(episode_id=f"e{total}", task_id="t", turns=turns, status=status,
                      reward=reward, timings={"total": total, "model": total / 2})


def test_rollout_metrics_hand_values():
    trajs = [_traj([3, 3], EpisodeStatus.resolved, 1.0, 10.0),      # skew 0
             _traj([2, 3], EpisodeStatus.unresolved, 0.0, 20.0),    # skew 1 (oldest turn)
             _traj([1], EpisodeStatus.limit_time, None, 30.0),      # skew 2, masked
             _traj([], EpisodeStatus.infra_error, None, 40.0)]      # no turn: no version
    m = rollout_metrics(trajs, trained_version=3)
    assert m["rollout/version_skew"] == {"0": 1, "1": 1, "2": 1}
    assert m["rollout/off_policy_rate"] == pytest.approx(2 / 3)
    assert m["rollout/reward_mean"] == 0.5 and m["rollout/pass_rate"] == 0.25
    # the scored episodes' rewards 1.0 and 0.0: sample std sqrt(0.5) (n - 1), n = 2
    assert m["rollout/reward_std"] == pytest.approx(0.5 ** 0.5) and m["rollout/reward_n"] == 2
    assert m["rollout/latency_p50_s"] == 25.0 and m["rollout/latency_p99_s"] == pytest.approx(39.7)
    assert m["rollout/turns_mean"] == pytest.approx(5 / 4)
    assert m["rollout/tokens_mean"] == pytest.approx(15 / 4)
    assert m["rollout/status/infra_error"] == 1 and m["rollout/status/resolved"] == 1
    assert m["rollout/phase_model_mean_s"] == 12.5 and m["rollout/phase_grading_mean_s"] == 0.0


def test_cost_per_rollout_hand_values():
    # 120 s step x 2 GPUs / 4 rollouts = 1 GPU-minute each; at 3/GPU-hour: 0.05 each
    c = cost_metrics(120.0, 4, price_per_hour=3.0, n_units=2, currency="EUR")
    assert c == {"cost/minutes_per_rollout": 1.0, "cost/money_per_rollout": pytest.approx(0.05),
                 "cost/currency": "EUR"}
    assert cost_metrics(60.0, 2, 1.0, 0, "USD")["cost/minutes_per_rollout"] == 0.5  # CPU: 1 unit
