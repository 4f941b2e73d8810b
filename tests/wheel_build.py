"""Build swefleet's wheel from a copy of the checkout (pip builds in the source tree: a copy keeps
`build/` and `*.egg-info` out of the shared checkout), without build isolation: offline."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: what the copy leaves out: version control, environments, outputs, caches, build products
SKIP = (".git", ".venv", "runs", "out", ".cache", "build", "dist", "*.egg-info", "__pycache__",
        ".pytest_cache", ".ruff_cache", ".whl", ".gl", "*.pyc")


def build_wheel(work: Path) -> Path:
    """The wheel built from a copy of the checkout under `work`."""
    src, dist = work / "src", work / "dist"
    shutil.copytree(ROOT, src, symlinks=True, ignore=shutil.ignore_patterns(*SKIP))
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
         "--no-index", "-q", "-w", str(dist)],
        capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = dist.glob("swefleet-*.whl")
    return wheel


def wheel_names(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as zf:
        return zf.namelist()


def wheel_text(wheel: Path, suffix: str) -> str:
    """The text of the one member whose path ends with `suffix` (e.g. `.dist-info/RECORD`)."""
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(suffix)]
        return zf.read(name).decode()


def foreign_top_level(wheel: Path) -> set[str]:
    """Top-level names the wheel would install besides `swefleet` and its dist-info: from its
    file list, its RECORD and its top_level.txt (where setuptools writes one)."""
    names = wheel_names(wheel)
    record = [line.split(",")[0] for line in wheel_text(wheel, ".dist-info/RECORD").splitlines()]
    tops = {n.split("/")[0] for n in names + [r for r in record if r]}
    if any(n.endswith(".dist-info/top_level.txt") for n in names):
        tops |= set(wheel_text(wheel, ".dist-info/top_level.txt").split())
    return {t for t in tops if t != "swefleet" and not t.endswith(".dist-info")}
