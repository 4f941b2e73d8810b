"""Step-time statistics: descriptive stats, the warm-up rule, and a two-level bootstrap.

Pure Python on lists of floats (no numpy), so the numbers a report shows can be checked by hand.
Conventions (documented in docs/bench.md):
- percentiles interpolate linearly between closest ranks (numpy's default `linear` method);
- the standard deviation is the sample one (n - 1); it is 0.0 for fewer than two values;
- the coefficient of variation is std / mean.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from swefleet.stats import median, percentile

#: scale that makes the MAD a consistent estimator of the standard deviation for normal data
MAD_TO_SIGMA = 1.4826
WARMUP_MADS = 3.0
"""A leading step is warm-up when it is more than this many (scaled) MADs above the reference."""
WARMUP_MIN_REL = 0.05
"""...and more than this fraction of the reference median above it (guards MAD = 0)."""


def mean(xs: Sequence[float]) -> float:
    if not xs:
        raise ValueError("mean of no values")
    return sum(xs) / len(xs)


def stdev(xs: Sequence[float]) -> float:
    """Sample standard deviation (n - 1 in the denominator); 0.0 below two values."""
    if len(xs) < 2:
        return 0.0
    m = mean(xs)
    return (sum((x - m) ** 2 for x in xs) / (len(xs) - 1)) ** 0.5


def coef_var(xs: Sequence[float]) -> float:
    m = mean(xs)
    return stdev(xs) / m if m else 0.0


def mad(xs: Sequence[float]) -> float:
    """Median absolute deviation from the median (unscaled)."""
    m = median(xs)
    return median([abs(x - m) for x in xs])


def summarize(xs: Sequence[float]) -> dict[str, float | int | None]:
    """The summary every step-time table uses; None values when there is nothing to summarize."""
    if not xs:
        return {"n": 0, "median_s": None, "p90_s": None, "mean_s": None, "std_s": None,
                "cv": None, "min_s": None, "max_s": None}
    return {"n": len(xs), "median_s": median(xs), "p90_s": percentile(xs, 90.0),
            "mean_s": mean(xs), "std_s": stdev(xs), "cv": coef_var(xs),
            "min_s": min(xs), "max_s": max(xs)}


def warmup_band(times: Sequence[float]) -> tuple[float, float]:
    """Reference: the second half of the run (never warm-up), median m. A step is steady when it
    lies within m -/+ max(3 * 1.4826 * MAD, 5% of m) of that reference."""
    ref = times[len(times) // 2:]
    m = median(ref)
    half = max(WARMUP_MADS * MAD_TO_SIGMA * mad(ref), WARMUP_MIN_REL * m)
    return m - half, m + half


def warmup_threshold(times: Sequence[float]) -> float:
    """The upper edge of `warmup_band`."""
    return warmup_band(times)[1]


def detect_warmup(times: Sequence[float]) -> int:
    """Number of leading warm-up steps of one run.

    Step 0 always counts (it fills the empty pipeline and includes compilation and the first
    model loads). Steps 1, 2, ... count while each lies outside `warmup_band`: above it (still
    compiling, caches cold) or below it (a batch that was generated while step 0 compiled, so it
    was ready at once: the pipeline has not settled). The scan stops at the first step inside
    the band and never takes more than half the run (at least ceil(n/2) steady-state steps
    remain for n >= 2).
    """
    n = len(times)
    if n <= 1:
        return n
    lo, hi = warmup_band(times)
    w = 1
    while w < n // 2 and not lo <= times[w] <= hi:
        w += 1
    return w


def hierarchical_resample(runs: Sequence[Sequence[float]], rng: random.Random) -> list[float]:
    """One bootstrap draw: runs with replacement, then steps with replacement within each run."""
    nonempty = [r for r in runs if r]
    out: list[float] = []
    for run in rng.choices(nonempty, k=len(nonempty)):
        out.extend(rng.choices(run, k=len(run)))
    return out


def bootstrap_delta_ci(
    a_runs: Sequence[Sequence[float]],
    b_runs: Sequence[Sequence[float]],
    stat: Callable[[Sequence[float]], float],
    *, n_boot: int = 2000, level: float = 0.95, seed: int = 0,
) -> tuple[float, float]:
    """Percentile CI of stat(B) - stat(A), resampling each side with `hierarchical_resample`
    (runs are the unit of replication; steps inside a run add within-run spread)."""
    if not any(a_runs) or not any(b_runs):
        raise ValueError("bootstrap needs at least one steady-state step on each side")
    rng = random.Random(seed)
    deltas = sorted(stat(hierarchical_resample(b_runs, rng))
                    - stat(hierarchical_resample(a_runs, rng)) for _ in range(n_boot))
    return (deltas[int((1 - level) / 2 * (n_boot - 1))],
            deltas[int((1 + level) / 2 * (n_boot - 1))])
