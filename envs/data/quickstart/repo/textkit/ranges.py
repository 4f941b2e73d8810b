"""Number ranges as people write them: '1-3, 7, 10-12'."""

from __future__ import annotations

from collections.abc import Iterable


def parse_ranges(text: str) -> list[int]:
    """Parse '1-3, 7, 10-12' into [1, 2, 3, 7, 10, 11, 12].

    The result is sorted and free of duplicates. Whitespace around items is allowed and empty
    items (e.g. from a trailing comma) are ignored. A descending range such as '5-2' raises
    ValueError.
    """
    numbers: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        start_text, dash, end_text = part.partition("-")
        start = int(start_text)
        end = int(end_text) if dash else start
        if start > end:
            raise ValueError(f"descending range: {part!r}")
        numbers.update(range(start, end + 1))
    return sorted(numbers)


def _runs(numbers: Iterable[int]) -> list[tuple[int, int]]:
    """Sorted, de-duplicated numbers grouped into (first, last) runs of consecutive values."""
    runs: list[list[int]] = []
    for n in sorted(set(numbers)):
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return [(first, last) for first, last in runs]


def format_ranges(numbers: Iterable[int]) -> str:
    """Format numbers compactly: [1, 2, 3, 7] -> '1-3,7'. The inverse of `parse_ranges`."""
    parts = []
    for first, last in _runs(numbers):
        if first == last:
            parts.append(str(first))
        else:
            parts.append(f"{first}-{last}")
    return ",".join(parts)
