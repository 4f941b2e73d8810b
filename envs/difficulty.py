"""Task difficulty, measured: each task's pass rate under a named model, kept in the task file,
and the RL sampler's choice of tasks from it.

`swefleet tasks difficulty --tasks FILE --eval DIR --key NAME` reads an eval's `report.json`
(`per_task`: the attempts' outcomes, infra errors left out) and writes into each evaluated
task's record `difficulty[NAME] = {"pass_rate": r, "attempts": n}`. A run with
`[tasks] difficulty_key = NAME` can then skip the tasks that model always solved or never
solved (`skip_always_solved`, `skip_never_solved`): a group of such a task has no reward
variance and teaches nothing. Tasks with no figure under NAME are kept.
"""

from __future__ import annotations

from collections import Counter


def pass_rates(report: dict) -> dict[str, tuple[float, int]]:
    """task id -> (pass rate, graded attempts) from an eval report's `per_task`; tasks whose
    attempts were all infra errors are left out."""
    out = {}
    for task, outcomes in report.get("per_task", {}).items():
        graded = [o for o in outcomes if o is not None]
        if graded:
            out[task] = (sum(bool(o) for o in graded) / len(graded), len(graded))
    return out


def record_difficulty(records: list[dict], rates: dict[str, tuple[float, int]], key: str) -> int:
    """Write `rates` under `difficulty[key]` of the matching records, in place; returns how many
    records got a figure."""
    written = 0
    for record in records:
        hit = rates.get(record["instance_id"])
        if hit is None:
            continue
        rate, attempts = hit
        record.setdefault("difficulty", {})[key] = {"pass_rate": round(rate, 4),
                                                    "attempts": attempts}
        written += 1
    return written


def pass_rate_of(task, key: str) -> float | None:
    """The task's recorded pass rate under `key`; None when it has none."""
    figures = (task.model_extra or {}).get("difficulty") or {}
    entry = figures.get(key) if isinstance(figures, dict) else None
    return entry.get("pass_rate") if isinstance(entry, dict) else None


def select_by_difficulty(tasks: list, key: str, skip_always: bool, skip_never: bool
                         ) -> tuple[list, dict[str, int]]:
    """(tasks kept, counts by reason: `always_solved`, `never_solved`, `unmeasured` (kept))."""
    kept, counts = [], Counter()
    for task in tasks:
        rate = pass_rate_of(task, key)
        if rate is None:
            counts["unmeasured"] += 1
        elif skip_always and rate >= 1.0:
            counts["always_solved"] += 1
            continue
        elif skip_never and rate <= 0.0:
            counts["never_solved"] += 1
            continue
        kept.append(task)
    return kept, {k: counts.get(k, 0) for k in ("always_solved", "never_solved", "unmeasured")}
