"""A record of gold-patch grades, kept across parity runs.

Grading every gold patch of a large task set many times on each backend takes hours, so it runs in
chunks; the record (one JSON line per task and run) says which golds have had how many grades on
each backend, which chunk to grade next, and what the grades came to in all. Lines are only ever
appended; a run's line is written after its grading ends. Each line holds the hash of the task
as it was graded (`task_hash`): once a task changes (new probes, other twins), its earlier grades
no longer count for it. A line may hold one backend's counts only: the bwrap half of a campaign
can run on a machine without Docker (a GPU node with the task set's rootfs bundle imported).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path

from swefleet.envs.parity import BACKENDS, Case

from swefleet.types import Task

#: Fields that say where the task's image comes from, not what is graded: the image name set-up
#: fills in (`prepare_task_images`) and the build fields a rootfs bundle drops once it names the
#: image (`envs/bwrap/bundle.py`).
_NOT_GRADED = {"image", "source_dir", "source_patch", "recipe"}


def task_hash(task: Task) -> str:
    """`sha256:<hex>` of the task's record (its probes and twins' settings included), less the
    fields that say where its image comes from: the same before and after set-up, and in the
    task file a bundle import writes."""
    return "sha256:" + hashlib.sha256(
        task.model_dump_json(exclude=_NOT_GRADED).encode()).hexdigest()


class RecordError(ValueError):
    """A record line that is not what `record_lines` writes (the file and line are named)."""


def record_lines(cases: Sequence[Case], verdicts: dict[str, list[dict]], date: str,
                 commit: str) -> list[dict]:
    """One line per task that has gold cases: per backend graded (one or both) its gold grades,
    how many resolved and how many were graded `tampered`."""
    lines: dict[str, dict] = {}
    for k, case in enumerate(cases):
        if case.label != "gold":
            continue
        line = lines.setdefault(case.task.instance_id, {
            "instance_id": case.task.instance_id, "task_hash": task_hash(case.task),
            "date": date, "commit": commit,
            **{b: {"grades": 0, "resolved": 0, "tampered": 0} for b in verdicts}})
        for backend, got in verdicts.items():
            line[backend]["grades"] += 1
            line[backend]["resolved"] += got[k]["status"] == "resolved"
            line[backend]["tampered"] += got[k]["status"] == "tampered"
    return list(lines.values())


def append_record(path: Path, lines: Iterable[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        for line in lines:
            f.write(json.dumps(line, sort_keys=True) + "\n")


def read_record(path: Path) -> list[dict]:
    """Every line of the record (none when the file does not exist)."""
    if not path.exists():
        return []
    out = []
    for n, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not text.strip():
            continue
        try:
            line = json.loads(text)
            graded = [b for b in BACKENDS if b in line]
            if not graded:
                raise KeyError("no backend's counts")
            for backend in graded:
                counts = line[backend]
                int(counts["grades"]), int(counts["resolved"]), int(counts["tampered"])
            str(line["instance_id"]), str(line["task_hash"])
        except (ValueError, KeyError, TypeError) as e:
            raise RecordError(f"{path}:{n}: not a gold-grade record line ({e!r})") from e
        out.append(line)
    return out


def grades_per_task(tasks: Sequence[Task],
                    lines: Iterable[dict]) -> dict[str, dict[str, dict[str, int]]]:
    """Per task of `tasks` the record holds grades of (as the task is now): per backend,
    grades, resolved and tampered summed over every run."""
    current = {t.instance_id: task_hash(t) for t in tasks}
    out: dict[str, dict[str, dict[str, int]]] = {}
    for line in lines:
        if current.get(line["instance_id"]) != line["task_hash"]:
            continue
        task = out.setdefault(line["instance_id"], {
            b: {"grades": 0, "resolved": 0, "tampered": 0} for b in BACKENDS})
        for backend in BACKENDS:
            for key in ("grades", "resolved", "tampered"):
                task[backend][key] += int(line.get(backend, {}).get(key, 0))
    return out


def fewest_grades(tasks: Sequence[Task], lines: Iterable[dict],
                  backends: Sequence[str] = BACKENDS) -> dict[str, int]:
    """Per task: the fewest recorded gold grades of `backends` (0 when none are recorded for
    the task as it is now)."""
    per_task = grades_per_task(tasks, lines)
    return {t.instance_id: min(per_task[t.instance_id][b]["grades"] for b in backends)
            if t.instance_id in per_task else 0 for t in tasks}


def gold_totals(lines: Iterable[dict], backends: Iterable[str]) -> dict[str, dict[str, int]]:
    """Per one of `backends`: the gold grades, resolved and tampered of `lines` summed."""
    lines = list(lines)
    return {b: {key: sum(int(line.get(b, {}).get(key, 0)) for line in lines)
                for key in ("grades", "resolved", "tampered")} for b in backends}


def record_summary(tasks: Sequence[Task], lines: Iterable[dict], wanted: int) -> dict:
    """What the record says of `tasks` (as they are now): how many have at least `wanted` gold
    grades on each backend, and per backend the grades, resolved and tampered over them all;
    the tasks with a gold grade not resolved are listed, each with the grades recorded after its
    last run that had one (`since_last_failure`: did a fix hold?)."""
    lines = list(lines)
    current = {t.instance_id: task_hash(t) for t in tasks}
    known = grades_per_task(tasks, lines)
    covered = [t for t, counts in known.items()
               if all(counts[b]["grades"] >= wanted for b in BACKENDS)]
    totals = gold_totals(known.values(), BACKENDS)
    not_resolved = sorted(t for t, counts in known.items() if _has_failure(counts))
    return {"tasks": len(tasks), "recorded": len(known),
            f"with_{wanted}_or_more_each": len(covered), "gold": totals,
            "not_always_resolved": not_resolved,
            "since_last_failure": {t: since_last_failure(lines, t, current[t])
                                   for t in not_resolved}}


def since_last_failure(lines: Iterable[dict], instance_id: str, graded_hash: str) -> dict:
    """The commit and date of the last run of the task (as `graded_hash`) with a gold grade not
    resolved, and per backend the grades of its runs recorded after that one (lines are appended
    in the order the runs ended): whether a fix held."""
    mine = [line for line in lines
            if line["instance_id"] == instance_id and line["task_hash"] == graded_hash]
    failed = [k for k, line in enumerate(mine) if _has_failure(line)]
    last = mine[failed[-1]] if failed else None
    return {"last_failure": last and {"commit": last.get("commit"), "date": last.get("date")},
            "after": gold_totals(mine[failed[-1] + 1:] if failed else mine, BACKENDS)}


def _has_failure(counts: dict) -> bool:
    """Whether `counts` (a record line, or a task's sums) hold a gold grade not resolved."""
    return any(int(counts.get(b, {}).get("resolved", 0)) < int(counts.get(b, {}).get("grades", 0))
               for b in BACKENDS)
