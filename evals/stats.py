"""Statistics for success rates: unbiased pass@k, pass^k, bootstrap confidence intervals.

All functions take per-task outcome lists (True = resolved) so every number in a report can be
recomputed from the raw per-episode records.
"""

from __future__ import annotations

import random
from math import comb


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k (Chen et al. 2021): P(at least one of k draws without replacement from n
    attempts with c successes is a success) = 1 - C(n-c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"k={k} > n={n} attempts")
    if n - c < k:
        return 1.0
    return 1.0 - comb(n - c, k) / comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k (tau-bench): P(all k draws without replacement succeed) = C(c, k) / C(n, k)."""
    if k > n:
        raise ValueError(f"k={k} > n={n} attempts")
    return comb(c, k) / comb(n, k)


def mean_pass_at_k(outcomes: dict[str, list[bool]], k: int) -> float:
    vals = [pass_at_k(len(o), sum(o), k) for o in outcomes.values() if len(o) >= k]
    return sum(vals) / len(vals) if vals else 0.0


def mean_pass_hat_k(outcomes: dict[str, list[bool]], k: int) -> float:
    vals = [pass_hat_k(len(o), sum(o), k) for o in outcomes.values() if len(o) >= k]
    return sum(vals) / len(vals) if vals else 0.0


def success_rate(outcomes: dict[str, list[bool]]) -> float:
    """Mean over tasks of the per-task success fraction (avg@k); tasks weigh equally."""
    per_task = [sum(o) / len(o) for o in outcomes.values() if o]
    return sum(per_task) / len(per_task) if per_task else 0.0


def bootstrap_ci(
    outcomes: dict[str, list[bool]], *, n_boot: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """Percentile bootstrap CI of `success_rate`, resampling tasks (the unit of variation)."""
    tasks = [o for o in outcomes.values() if o]
    if not tasks:
        return (0.0, 0.0)
    per_task = [sum(o) / len(o) for o in tasks]
    rng = random.Random(seed)
    n = len(per_task)
    stats = sorted(sum(rng.choices(per_task, k=n)) / n for _ in range(n_boot))
    lo_i = int((1 - level) / 2 * (n_boot - 1))
    hi_i = int((1 + level) / 2 * (n_boot - 1))
    return (stats[lo_i], stats[hi_i])


def flip_rate(outcomes: dict[str, list[bool]]) -> float:
    """Fraction of tasks with mixed outcomes across attempts (neither all pass nor all fail)."""
    multi = [o for o in outcomes.values() if len(o) > 1]
    if not multi:
        return 0.0
    return sum(1 for o in multi if 0 < sum(o) < len(o)) / len(multi)


def bootstrap_task_delta_ci(
    a: dict[str, float], b: dict[str, float], *, n_boot: int = 2000, level: float = 0.95,
    seed: int = 0,
) -> tuple[tuple[float, float], bool]:
    """Percentile bootstrap CI of mean(b) - mean(a) over per-task values (e.g. success fraction).

    Paired (the same resampled tasks on both sides) when both cover the same tasks, which removes
    the task-difficulty spread from the difference; otherwise each side is resampled on its own.
    Returns ((lo, hi), paired).
    """
    if not a or not b:
        raise ValueError("bootstrap needs at least one task on each side")
    rng = random.Random(seed)
    paired = a.keys() == b.keys()
    if paired:
        diffs = [b[t] - a[t] for t in sorted(a)]
        stats = sorted(sum(rng.choices(diffs, k=len(diffs))) / len(diffs) for _ in range(n_boot))
    else:
        va, vb = list(a.values()), list(b.values())
        stats = sorted(sum(rng.choices(vb, k=len(vb))) / len(vb)
                       - sum(rng.choices(va, k=len(va))) / len(va) for _ in range(n_boot))
    lo_i = int((1 - level) / 2 * (n_boot - 1))
    hi_i = int((1 + level) / 2 * (n_boot - 1))
    return (stats[lo_i], stats[hi_i]), paired
