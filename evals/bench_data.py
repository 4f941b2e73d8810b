"""Read one RL run directory into per-step rows: the raw material of every bench number.

Sources (see swefleet/rundir.py): `weights.jsonl` (when each policy version was served: the step
clock), `metrics.jsonl` (orchestrator, one record per step), `trainer_metrics.jsonl` (trainer,
one record per optimizer step), `episodes.jsonl` (one record per episode), `config.json`.

Step i (0-based) ends when policy version i+1 is served; its time is
`served_at_s(v=i+1) - served_at_s(v=i)`, with `served_at_s(v=0) = 0` (the loop start).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from swefleet.evals.bench_events import checkpoint_steps, label_events

from swefleet.rundir import read_jsonl

#: phase column -> (file, key) it is read from; all are seconds and keyed by step
PHASE_SOURCES: dict[str, tuple[str, str]] = {
    "wait_for_data_s": ("metrics.jsonl", "time/wait_for_data_s"),
    "trainer_wait_s": ("trainer_metrics.jsonl", "wait_time_s"),
    "train_s": ("trainer_metrics.jsonl", "step_time_s"),
    "export_s": ("trainer_metrics.jsonl", "export_time_s"),
    "weight_sync_s": ("weights.jsonl", "sync_s"),
}
PHASES = tuple(PHASE_SOURCES)


@dataclass
class RunData:
    name: str
    """Directory name (`run-0`, ...)."""
    config: dict
    """The run's resolved `config.json`."""
    rows: list[dict]
    """One row per step: step, time_s, served_at_s, the PHASES columns (None when the source
    record is missing), batch_interval_s (the orchestrator's time between handing batch i-1
    and batch i to the trainer), rollouts, samples, tokens_per_s, checkpoint_blocking_s (of the
    checkpoint the trainer started after this step; None when checkpoints are off) and event
    (evals/bench_events.py: a periodic event's label, or None)."""
    episodes: list[dict]
    """task_id and status of every episode the run recorded."""

    @property
    def expected_steps(self) -> int:
        return int(self.config["orchestrator"]["steps"])

    @property
    def complete(self) -> bool:
        return len(self.rows) >= self.expected_steps

    @property
    def step_times(self) -> list[float]:
        return [r["time_s"] for r in self.rows]


def find_run_dirs(root: Path) -> list[Path]:
    """`root` itself when it is a run directory, else its `run-<i>` children in index order."""
    if (root / "config.json").exists():
        return [root]
    runs = [p for p in root.glob("run-*") if p.is_dir() and re.fullmatch(r"run-\d+", p.name)]
    if not runs:
        raise FileNotFoundError(f"{root}: no run directories (run-<i>/ with config.json)")
    return sorted(runs, key=lambda p: int(p.name.split("-")[1]))


def load_run(path: Path) -> RunData:
    config_path = path / "config.json"
    if not config_path.exists():
        raise FileNotFoundError(f"{path}: no config.json; not a run directory")
    config = json.loads(config_path.read_text())
    rows = step_rows(read_jsonl(path / "weights.jsonl"), read_jsonl(path / "metrics.jsonl"),
                     read_jsonl(path / "trainer_metrics.jsonl"), source=path)
    episodes = [{"task_id": e["task_id"], "status": e["status"]}
                for e in read_jsonl(path / "episodes.jsonl")]
    return RunData(path.name, config, rows, episodes)


def step_rows(weights: list[dict], metrics: list[dict], trainer: list[dict],
              source: Path | str = "") -> list[dict]:
    """Join the three per-step sources on the step index; stops at the first missing version.
    Steps a trainer checkpoint held up are labelled (`event`)."""
    by_file = {"weights.jsonl": {int(r["version"]) - 1: r for r in weights},
               "metrics.jsonl": {int(r["step"]): r for r in metrics},
               "trainer_metrics.jsonl": {int(r["step"]): r for r in trainer}}
    rows: list[dict] = []
    prev, step = 0.0, 0
    while step in by_file["weights.jsonl"]:
        at = float(by_file["weights.jsonl"][step]["served_at_s"])
        if at <= prev:
            raise ValueError(f"{source}: weights.jsonl served_at_s does not increase at "
                             f"v{step + 1} ({at} <= {prev}); a resumed run is not supported")
        row = {"step": step, "time_s": at - prev, "served_at_s": at}
        for phase, (file, key) in PHASE_SOURCES.items():
            value = by_file[file].get(step, {}).get(key)
            row[phase] = None if value is None else float(value)
        m = by_file["metrics.jsonl"].get(step, {})
        row["batch_interval_s"] = m.get("time/step_s")
        row["rollouts"] = m.get("rollout/episodes")
        row["samples"] = m.get("batch/samples")
        t = by_file["trainer_metrics.jsonl"].get(step, {})
        row["tokens_per_s"] = t.get("tokens_per_s")
        row["checkpoint_blocking_s"] = t.get("checkpoint_blocking_s")
        rows.append(row)
        prev, step = at, step + 1
    label_events(rows, checkpoint_steps(trainer))
    return rows
