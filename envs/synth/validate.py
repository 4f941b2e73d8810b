"""`swefleet tasks validate FILE`: every task's gold patch resolves it, the empty patch does
not, and k repeated runs of each agree. Works on any task file (recipe or source-dir tasks)."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from swefleet.envs.grading import DockerGrader, grade_many

from swefleet.types import GradeResult, GradeStatus, Task


@dataclass
class Row:
    instance_id: str
    split: str
    gold: list[str]
    """Status of each gold run."""
    empty: list[str]
    """Status of each empty-patch run."""
    reasons: list[str]
    ok: bool


def check(task: Task, gold: list[GradeResult], empty: list[GradeResult]) -> Row:
    ok = all(r.status == GradeStatus.resolved for r in gold) and all(
        r.status == GradeStatus.unresolved for r in empty)
    reasons = sorted({r.reason for r in gold + empty if r.reason})
    return Row(task.instance_id, task.split, [r.status.value for r in gold],
               [r.status.value for r in empty], reasons, ok)


async def validate_tasks(
    tasks: list[Task], grader: DockerGrader, k: int, concurrency: int
) -> list[Row]:
    jobs = [t for t in tasks for _ in range(k)]
    gold = await grade_many(jobs, {t.instance_id: t.patch for t in tasks}, grader, concurrency)
    empty = await grade_many(jobs, {t.instance_id: "" for t in tasks}, grader, concurrency)
    return [check(t, gold[i * k : (i + 1) * k], empty[i * k : (i + 1) * k])
            for i, t in enumerate(tasks)]


def summary(rows: list[Row], k: int) -> dict:
    by_split: dict[str, dict[str, int]] = {}
    for r in rows:
        s = by_split.setdefault(r.split, {"tasks": 0, "valid": 0})
        s["tasks"] += 1
        s["valid"] += int(r.ok)
    return {
        "tasks": len(rows), "valid": sum(r.ok for r in rows), "k": k, "splits": by_split,
        "invalid": [asdict(r) for r in rows if not r.ok],
    }
