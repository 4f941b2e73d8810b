"""The one percentile definition (swefleet.stats): numpy's linear method, explicit empties."""

import math

import numpy as np
import pytest

from swefleet.stats import median, percentile

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("q", [0, 1, 10, 50, 90, 95, 99, 99.9, 100])
def test_matches_numpy_linear(q):
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 10, 101):
        xs = rng.exponential(size=n).tolist()
        assert percentile(xs, q) == pytest.approx(float(np.percentile(xs, q)), rel=1e-12)


def test_order_of_input_does_not_matter_and_median_is_p50():
    assert percentile([3.0, 1.0, 2.0, 4.0], 50) == 2.5 == median([4.0, 2.0, 1.0, 3.0])


def test_no_values_raise_unless_a_default_is_given():
    with pytest.raises(ValueError, match="no values"):
        percentile([], 50)
    assert math.isnan(percentile([], 99, empty=math.nan))
    assert percentile([], 50, empty=0.0) == 0.0
    assert median([], empty=-1.0) == -1.0
