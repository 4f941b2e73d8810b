"""Statistics for success rates: unbiased pass@k, pass^k, confidence intervals (bootstrap, Wilson).

All functions take per-task outcome lists (True = resolved) so every number in a report can be
recomputed from the raw per-episode records.
"""

from __future__ import annotations

import random
from math import comb, sqrt
from statistics import NormalDist


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


def mean_pass_at_k(outcomes: dict[str, list[bool]], k: int) -> float | None:
    """Mean over tasks with >= k attempts; None when no task has k attempts."""
    vals = [pass_at_k(len(o), sum(o), k) for o in outcomes.values() if len(o) >= k]
    return sum(vals) / len(vals) if vals else None


def mean_pass_hat_k(outcomes: dict[str, list[bool]], k: int) -> float | None:
    """Mean over tasks with >= k attempts; None when no task has k attempts."""
    vals = [pass_hat_k(len(o), sum(o), k) for o in outcomes.values() if len(o) >= k]
    return sum(vals) / len(vals) if vals else None


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


def wilson_interval(p: float, n: int, level: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a proportion `p` observed over `n` units; (0, 1) for n = 0. For a
    mean of values in [0, 1] (per-task fractions) it assumes the largest variance, p(1 - p)."""
    if n == 0:
        return (0.0, 1.0)
    z = NormalDist().inv_cdf((1 + level) / 2)
    center = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return (0.0 if p <= 0 else max(0.0, center - half), 1.0 if p >= 1 else min(1.0, center + half))


def success_rate_ci(
    outcomes: dict[str, list[bool]], *, n_boot: int = 2000, level: float = 0.95, seed: int = 0
) -> tuple[float, float]:
    """CI of `success_rate`: the union of the task bootstrap (`bootstrap_ci`) and the Wilson
    interval over scored tasks. The bootstrap alone collapses to a point when every task has the
    same outcome (0/n, n/n, one task); Wilson keeps an honest width there."""
    blo, bhi = bootstrap_ci(outcomes, n_boot=n_boot, level=level, seed=seed)
    wlo, whi = wilson_interval(success_rate(outcomes), sum(1 for o in outcomes.values() if o),
                               level)
    return (min(blo, wlo), max(bhi, whi))


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
