"""Trajectory files: one JSON document per episode, JSONL episode logs, and SWE-bench
predictions. The format is documented in `docs/trajectory_format.md`.

Whole files are written atomically (temp file in the same directory, then rename); episode
logs are appended one line per episode and flushed, so a crash loses at most a partial line,
which `read_trajectories` skips.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from swefleet.rundir import write_text_atomic
from swefleet.types import Trajectory


def write_trajectory(traj: Trajectory, path: str | Path) -> Path:
    """Write one trajectory as an indented JSON document."""
    return _write_atomic(Path(path), traj.model_dump_json(indent=2) + "\n")


def read_trajectory(path: str | Path) -> Trajectory:
    return Trajectory.model_validate_json(Path(path).read_text())


def append_trajectories(trajs: Iterable[Trajectory], path: str | Path) -> None:
    """Append one JSON line per trajectory (the `episodes.jsonl` format), flushed to disk."""
    lines = "".join(t.model_dump_json() + "\n" for t in trajs)
    with open(path, "a", encoding="utf-8") as f:
        f.write(lines)
        f.flush()
        os.fsync(f.fileno())


def read_trajectories(path: str | Path) -> list[Trajectory]:
    """Read an episodes JSONL file; a torn last line (no newline, from a crash) is skipped."""
    text = Path(path).read_text(encoding="utf-8")
    lines = text.split("\n")
    complete = lines[:-1]  # the part after the last newline is empty or torn
    return [Trajectory.model_validate_json(line) for line in complete if line.strip()]


def prediction(traj: Trajectory, model_name_or_path: str) -> dict[str, str]:
    """One SWE-bench prediction record."""
    return {
        "instance_id": traj.task_id,
        "model_name_or_path": model_name_or_path,
        "model_patch": traj.model_patch,
    }


def write_predictions(
    trajs: Iterable[Trajectory], path: str | Path, model_name_or_path: str
) -> Path:
    """SWE-bench predictions JSONL (`instance_id`, `model_name_or_path`, `model_patch`),
    one line per trajectory, written atomically."""
    lines = "".join(json.dumps(prediction(t, model_name_or_path)) + "\n" for t in trajs)
    return _write_atomic(Path(path), lines)


def _write_atomic(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, text)
    return path
