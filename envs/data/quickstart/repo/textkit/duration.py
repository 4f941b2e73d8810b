"""Human-readable durations: '1h30m' <-> 5400 seconds."""

from __future__ import annotations

import re

#: Seconds per unit, largest first (`format_duration` relies on this order).
UNIT_SECONDS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}

_TOKEN = re.compile(r"(\d+)\s*([wdhms])")


def parse_duration(text: str) -> int:
    """Parse a duration such as '90s', '1h30m' or '2d 4h' into seconds.

    Units are w, d, h, m, s (case-insensitive); whitespace between parts is allowed. Raises
    ValueError for anything that is not a sequence of <number><unit> parts.
    """
    s = text.strip().lower()
    total = 0
    pos = 0
    for match in _TOKEN.finditer(s):
        if s[pos : match.start()].strip():
            raise ValueError(f"invalid duration: {text!r}")
        total += int(match.group(1)) * UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos == 0 or s[pos:].strip():
        raise ValueError(f"invalid duration: {text!r}")
    return total


def format_duration(seconds: int) -> str:
    """Format seconds as '1d 2h 3m 4s', largest unit first, skipping zero units; 0 -> '0s'."""
    if seconds < 0:
        raise ValueError(f"seconds must not be negative, got {seconds}")
    parts = []
    for unit, size in UNIT_SECONDS.items():
        count, seconds = divmod(seconds, size)
        if count:
            parts.append(f"{count}{unit}")
    return " ".join(parts) or "0s"
