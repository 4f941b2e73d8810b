"""The one percentile definition every report, metric and benchmark uses."""

from __future__ import annotations

from collections.abc import Sequence

_RAISE = object()


def percentile(values: Sequence[float], q: float, *, empty: float | object = _RAISE) -> float:
    """The `q`-th percentile (q in [0, 100]) with linear interpolation between the closest ranks
    (numpy's default, `method="linear"`). No values: `empty` if given, else ValueError."""
    if not values:
        if empty is _RAISE:
            raise ValueError("percentile of no values")
        return float(empty)  # type: ignore[arg-type]
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)


def median(values: Sequence[float], *, empty: float | object = _RAISE) -> float:
    return percentile(values, 50.0, empty=empty)
