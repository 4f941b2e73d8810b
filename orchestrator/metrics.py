"""Step metrics, reduced once per step from the episodes consumed in it (namespaced keys)."""

from __future__ import annotations

import statistics
from collections import Counter

from swefleet.stats import percentile
from swefleet.types import EpisodeStatus, GradeStatus, Trajectory


def rollouts_dropped(drops: dict[str, int]) -> int:
    """Rollouts dropped in all (stale, straggler) from the loop's drop counters; an empty batch
    is a dropped step, and a zero-variance group set aside for a new one was scored and counts
    in its step's figures: neither is a dropped rollout."""
    return sum(n for reason, n in drops.items() if reason not in NOT_ROLLOUT_DROPS)


#: drop counters that are not rollouts lost (`rollouts_dropped`).
NOT_ROLLOUT_DROPS = ("empty_batch", "zero_variance_resampled")


def rollout_metrics(trajs: list[Trajectory], trained_version: int) -> dict:
    """Metrics of the episodes one batch consumed (its groups, and the zero-variance groups set
    aside for new ones while it was collected)."""
    statuses = Counter(t.status.value for t in trajs)
    rewards = [t.reward for t in trajs if t.reward is not None]
    latencies = [t.timings.get("total", 0.0) for t in trajs]
    skews = Counter(trained_version - min(t.policy_versions) for t in trajs if t.policy_versions)
    off_policy = sum(n for skew, n in skews.items() if skew > 0)
    out = {
        "rollout/episodes": len(trajs),
        "rollout/reward_mean": sum(rewards) / len(rewards) if rewards else 0.0,
        "rollout/reward_std": statistics.stdev(rewards) if len(rewards) > 1 else 0.0,
        "rollout/reward_n": len(rewards),
        "rollout/pass_rate": statuses.get(EpisodeStatus.resolved.value, 0) / max(len(trajs), 1),
        "rollout/turns_mean": sum(len(t.turns) for t in trajs) / max(len(trajs), 1),
        "rollout/tokens_mean": sum(t.n_tokens for t in trajs) / max(len(trajs), 1),
        "rollout/latency_p50_s": percentile(latencies, 50, empty=0.0),
        "rollout/latency_p99_s": percentile(latencies, 99, empty=0.0),
        "rollout/off_policy_rate": off_policy / max(sum(skews.values()), 1),
        "rollout/version_skew": {str(k): v for k, v in sorted(skews.items())},
    }
    for status, n in statuses.items():
        out[f"rollout/status/{status}"] = n
    graded = [t.grade for t in trajs if t.grade is not None]
    out["rollout/grade_tampered"] = sum(g.status == GradeStatus.tampered for g in graded)
    out["rollout/grade_flagged"] = sum(bool(g.flags) for g in graded)
    refused = [t for t in trajs if t.refused_submits]
    out["rollout/refused_submits"] = len(refused)
    out["rollout/resolved_after_refused_submit"] = sum(
        t.status == EpisodeStatus.resolved for t in refused)
    for phase in ("sandbox", "model", "env", "grading"):
        vals = [t.timings[phase] for t in trajs if phase in t.timings]
        out[f"rollout/phase_{phase}_mean_s"] = sum(vals) / len(vals) if vals else 0.0
    return out


def cost_metrics(step_time_s: float, n_rollouts: int, price_per_hour: float, n_units: int,
                 currency: str) -> dict:
    """Cost per rollout in money and in machine-minutes for one step."""
    units = max(n_units, 1)
    minutes = step_time_s / 60.0 * units / max(n_rollouts, 1)
    return {
        "cost/minutes_per_rollout": minutes,
        "cost/money_per_rollout": minutes / 60.0 * price_per_hour,
        "cost/currency": currency,
    }
