"""Backend parity: the same patches graded by the Docker and the bwrap backend get one verdict.

A case is a (task, patch) pair with a label (`gold`, `empty`, a hostile technique's name). Each
backend grades every case with its own grader (`envs.backends.make_grader`, the settings of
`FarmConfig.grading`); the verdicts are compared on what a consumer decides on: status,
resolved, cause, tampered, flagged, and the dropped paths. The logs and reasons are not
compared (durations and tracebacks differ).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from swefleet.envs.config import FarmConfig
from swefleet.envs.grading import grade_many

from swefleet.types import GradeResult, GradeStatus, Task

BACKENDS = ("docker", "bwrap")


@dataclass(frozen=True)
class Case:
    """One patch to grade on one task; `label` names what the patch is."""

    label: str
    task: Task
    patch: str


def verdict_of(r: GradeResult) -> dict:
    """What a consumer decides on, from a grade."""
    return {"status": r.status.value, "resolved": r.status == GradeStatus.resolved,
            "cause": r.cause.value, "tampered": r.status == GradeStatus.tampered,
            "flagged": bool(r.flags), "dropped_paths": sorted(r.dropped_paths)}


@dataclass
class ParityReport:
    """The verdicts of every case on each backend and where they differ."""

    cases: list[Case]
    verdicts: dict[str, list[dict]]
    """Per backend, one verdict per case (in the order of `cases`)."""
    reasons: dict[str, list[str]]
    """Per backend, the grade's reason per case (for people reading a disagreement)."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Per backend, wall time of grading every case."""

    @property
    def compared(self) -> bool:
        """Both backends graded the cases (not one alone)."""
        return set(self.verdicts) == set(BACKENDS)

    def disagreements(self) -> list[dict]:
        """Cases whose verdicts differ; none when only one backend graded them."""
        if not self.compared:
            return []
        out = []
        for k, case in enumerate(self.cases):
            a, b = (self.verdicts[name][k] for name in BACKENDS)
            if a != b:
                fields = sorted(key for key in a if a[key] != b.get(key))
                out.append({"task": case.task.instance_id, "case": case.label, "fields": fields,
                            **{name: {**self.verdicts[name][k], "reason": self.reasons[name][k]}
                               for name in BACKENDS}})
        return out

    def summary(self) -> dict:
        bad = self.disagreements()
        return {"tasks": len({c.task.instance_id for c in self.cases}), "cases": len(self.cases),
                "agreements": len(self.cases) - len(bad) if self.compared else None,
                "disagreements": bad,
                "seconds": {name: round(s, 1) for name, s in self.seconds.items()}}

    def table(self) -> str:
        names = [name for name in BACKENDS if name in self.verdicts]
        rows = [f"{'task':44} {'case':28} " + " ".join(f"{name:28}" for name in names)]
        for k, case in enumerate(self.cases):
            got = [self.verdicts[name][k] for name in names]
            mark = "  <-- differs" if any(v != got[0] for v in got) else ""
            rows.append(f"{case.task.instance_id[:44]:44} {case.label[:28]:28} "
                        + " ".join(f"{_cell(v):28}" for v in got) + mark)
        return "\n".join(rows)


def _cell(v: dict) -> str:
    extra = ("+flagged" if v["flagged"] else "") + ("+dropped" if v["dropped_paths"] else "")
    return f"{v['status']}/{v['cause']}{extra}"


async def grade_cases(grader, cases: Sequence[Case], concurrency: int) -> list[GradeResult]:
    """Grade every case (a task may appear in many: each case gets its own instance id)."""
    keyed = [c.task.model_copy(update={"instance_id": f"{c.task.instance_id}.case{k}"})
             for k, c in enumerate(cases)]
    patches = {t.instance_id: c.patch for t, c in zip(keyed, cases)}
    return await grade_many(keyed, patches, grader, concurrency=concurrency)


def check_parity(cases: Sequence[Case], run_id: str, config: FarmConfig | None = None,
                 concurrency: int = 2, backends: Sequence[str] = BACKENDS) -> ParityReport:
    """Grade `cases` on both backends (one after the other, so each has the machine to itself)
    with the grading settings of `config` and compare the verdicts. With one of `backends`
    only (a machine without Docker grades the bwrap half), the cases are graded there and
    nothing is compared."""
    from swefleet.envs.backends import make_grader

    base = config or FarmConfig()
    report = ParityReport(list(cases), {}, {})
    for name in backends:
        grader = make_grader(run_id, base.model_copy(update={"backend": name}))
        started = time.monotonic()
        try:
            results = asyncio.run(grade_cases(grader, cases, concurrency))
        finally:
            grader.close()
        report.seconds[name] = time.monotonic() - started
        report.verdicts[name] = [verdict_of(r) for r in results]
        report.reasons[name] = [r.reason for r in results]
    return report
