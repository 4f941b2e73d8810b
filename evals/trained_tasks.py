"""Which tasks a checkpoint was trained on, and how many of an eval's tasks are among them.

`swefleet rl` and `swefleet sft` write `trained_tasks.json` in their run directory: the ids of
the tasks they train on, merged with the record of the checkpoint they start from (an RL run
from an SFT checkpoint lists the SFT tasks too) and with the record already there (a resumed
run). `swefleet eval --agent model --model <run>/weights/vNNNNNN` reads the record of the run
the checkpoint comes from (`<model>/trained_tasks.json`, else `<run>/trained_tasks.json`) and
reports the overlap (`trained_overlap` in report.json, the first line of report.md).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

from swefleet.rundir import write_json_atomic

TRAINED_TASKS = "trained_tasks.json"


def record_path(model_dir: str | Path) -> Path | None:
    """The `trained_tasks.json` that describes the checkpoint in `model_dir`, or None: the
    checkpoint's own, else its run's when it is a published version (`<run>/weights/vN`). A
    model a run merely started from (`<run>/model`) has none."""
    model_dir = Path(model_dir)
    candidates = [model_dir / TRAINED_TASKS]
    if model_dir.parent.name == "weights":
        candidates.append(model_dir.parent.parent / TRAINED_TASKS)
    return next((p for p in candidates if p.is_file()), None)


def read_task_ids(path: Path) -> list[str]:
    return list(json.loads(path.read_text())["task_ids"])


def record_trained_tasks(run_root: Path, task_ids: Iterable[str], source: str,
                         start_model: str | Path | None = None) -> Path:
    """Write (or extend) `<run_root>/trained_tasks.json` with `task_ids` from `source` and the
    ids the starting checkpoint was trained on; returns its path."""
    path = run_root / TRAINED_TASKS
    ids, sources = set(task_ids), [source]
    if path.is_file():
        previous = json.loads(path.read_text())
        ids |= set(previous["task_ids"])
        sources = list(dict.fromkeys([*previous.get("sources", []), source]))
    inherited = record_path(start_model) if start_model else None
    if inherited is not None and inherited.resolve() != path.resolve():
        ids |= set(read_task_ids(inherited))
        sources.append(str(inherited.resolve()))
    write_json_atomic(path, {"task_ids": sorted(ids), "sources": sources})
    return path


def overlap_fields(model_dir: str | Path, evaluated: Iterable[str]) -> dict:
    """`trained_overlap` of an eval of the checkpoint in `model_dir`: the record found (None:
    no record, overlap unknown), the counts and the evaluated ids that were trained on."""
    evaluated = sorted(set(evaluated))
    path = record_path(model_dir)
    if path is None:
        return {"trained_overlap": {"record": None, "n_evaluated": len(evaluated),
                                    "n_trained": None, "n_overlap": None, "overlap_ids": None}}
    trained = set(read_task_ids(path))
    both = [t for t in evaluated if t in trained]
    return {"trained_overlap": {"record": str(path.resolve()), "n_evaluated": len(evaluated),
                                "n_trained": len(trained), "n_overlap": len(both),
                                "overlap_ids": both}}


def unknown_overlap(evaluated: Iterable[str], why: str) -> dict:
    """`trained_overlap` of an eval whose model's training record cannot be looked up (a chat
    endpoint, predictions made elsewhere): unknown, and why."""
    return {"trained_overlap": {"record": None, "n_evaluated": len(set(evaluated)),
                                "n_trained": None, "n_overlap": None, "overlap_ids": None,
                                "unknown_because": why}}


def overlap_line(overlap: dict) -> str:
    """report.md's first line about the overlap."""
    if overlap["record"] is None:
        why = overlap.get("unknown_because") or ("no trained_tasks.json beside the checkpoint "
                                                 "or in its run directory")
        return f"- trained tasks: **unknown** ({why})"
    n, m = overlap["n_overlap"], overlap["n_evaluated"]
    if not n:
        return f"- trained tasks: none of the {m} evaluated tasks ({overlap['record']})"
    shown = ", ".join(overlap["overlap_ids"][:10]) + (", ..." if n > 10 else "")
    return (f"- **trained on {n} of the {m} evaluated tasks** ({overlap['record']}): {shown}")
