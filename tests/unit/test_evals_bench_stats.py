"""Step-time statistics and the warm-up rule, against hand computations."""

import random

import pytest
from swefleet.evals.steptime import (
    bootstrap_delta_ci,
    coef_var,
    detect_warmup,
    hierarchical_resample,
    mad,
    median,
    percentile,
    stdev,
    summarize,
    warmup_band,
    warmup_threshold,
)

pytestmark = pytest.mark.unit


def test_descriptive_stats_hand_values():
    xs = [4.0, 1.0, 3.0, 2.0]
    assert median(xs) == 2.5
    assert percentile(xs, 90) == pytest.approx(3.7)  # sorted 1 2 3 4: pos 2.7 -> 3 + 0.7
    assert percentile(xs, 0) == 1.0 and percentile(xs, 100) == 4.0
    assert stdev(xs) == pytest.approx((5 / 3) ** 0.5)  # squares 2.25+.25+.25+2.25 = 5, n-1 = 3
    assert coef_var(xs) == pytest.approx((5 / 3) ** 0.5 / 2.5)
    assert mad([1.0, 2.0, 2.0, 4.0, 10.0]) == 1.0  # |x - 2| = 1 0 0 2 8 -> median 1
    assert stdev([3.0]) == 0.0
    assert summarize([])["median_s"] is None and summarize([])["n"] == 0
    with pytest.raises(ValueError):
        percentile([], 50)


def test_warmup_threshold_uses_second_half_median_and_mad():
    # second half 2.25 1.75 2: median 2, MAD 0.25 -> 2 + 3 * 1.4826 * 0.25
    assert warmup_threshold([10, 4, 2, 2.25, 1.75, 2]) == pytest.approx(2 + 3 * 1.4826 * 0.25)
    # MAD 0: the 5% floor applies -> 2.5 * 1.05
    assert warmup_threshold([8, 2.5, 2.5, 3, 2.5, 2.5]) == pytest.approx(2.625)
    assert warmup_band([8, 2.5, 2.5, 3, 2.5, 2.5]) == pytest.approx((2.375, 2.625))


@pytest.mark.parametrize("times, expected", [
    ([10, 4, 2, 2.25, 1.75, 2], 2),  # step 1 (4 s) is above 3.112 s, step 2 is not
    ([8, 2.5, 2.5, 3, 2.5, 2.5], 1),  # step 0 always counts, even when step 1 is steady
    ([5, 5, 5, 5], 1),  # flat run: only step 0
    ([10, 2.09, 2, 2, 2, 2], 1),  # just below median * 1.05 = 2.1
    ([10, 2.11, 2, 2, 2, 2], 2),  # just above it
    ([10, 2, 6, 2, 2, 2], 1),  # a slow step after a steady one is not warm-up
    ([9, 9, 9, 9, 1, 1, 1, 1], 4),  # never more than half the run
    ([16.6, 1.43, 3.36, 2.99, 3.1, 3.19, 3.18, 3.6, 3.02, 3.27], 2),  # step 1 far below: not settled
    ([10, 1.9, 2, 2, 2, 2], 1),  # within 5% below the median: steady
    ([3.0], 1),
    ([3.0, 1.0], 1),
    ([], 0),
])
def test_detect_warmup(times, expected):
    assert detect_warmup(times) == expected


def test_hierarchical_resample_draws_runs_then_steps():
    rng = random.Random(0)
    runs = [[1.0, 1.0], [5.0, 5.0, 5.0], []]
    for _ in range(50):
        draw = hierarchical_resample(runs, rng)
        # two non-empty runs are drawn (with replacement), each contributes its own length
        assert len(draw) in (4, 5, 6)
        assert set(draw) <= {1.0, 5.0}


def test_bootstrap_delta_ci_separates_shift_from_noise():
    a = [[2.0, 2.1, 1.9, 2.0], [2.05, 1.95, 2.0, 2.1]]
    shifted = [[x + 1.0 for x in run] for run in a]
    lo, hi = bootstrap_delta_ci(a, shifted, median, n_boot=500)
    assert 0.8 < lo <= 1.0 <= hi < 1.2
    lo, hi = bootstrap_delta_ci(a, a, median, n_boot=500)
    assert lo <= 0.0 <= hi
    with pytest.raises(ValueError):
        bootstrap_delta_ci([[]], a, median)
