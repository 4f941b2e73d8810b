"""FAIL_TO_PASS / PASS_TO_PASS of generated tasks, from k graded runs of each state.

As in `envs/data/make_quickstart.py`, the lists are not written by hand: the real grader runs
the task's test files (test patch applied) on the buggy state (empty patch) and with the gold
patch, here k times each. FAIL_TO_PASS: fails in every buggy run and passes in every gold run;
PASS_TO_PASS: passes in all 2k runs. A test whose outcome differs between runs of the same state
is flaky and is in neither list. Then the stored logs are graded again with the final lists
(`regrade_from_log`): every gold run must be resolved and every buggy run unresolved.
"""

from __future__ import annotations

from dataclasses import dataclass

from swefleet.envs.gradelog import regrade_from_log
from swefleet.envs.grading import DockerGrader, grade_many
from swefleet.envs.synth.probe import well_formed

from swefleet.types import GradeResult, GradeStatus, Task


@dataclass
class Derived:
    task: Task
    ok: bool
    reason: str = ""
    flaky: int = 0
    """Tests dropped because their outcome differed between runs of one state."""


async def derive_lists(
    tasks: list[Task], grader: DockerGrader, k: int, concurrency: int
) -> list[Derived]:
    """Fill the lists of `tasks` (in place) from k buggy and k gold runs each."""
    jobs = [t for t in tasks for _ in range(k)]
    empty = await grade_many(jobs, {t.instance_id: "" for t in tasks}, grader, concurrency)
    gold = await grade_many(jobs, {t.instance_id: t.patch for t in tasks}, grader, concurrency)
    return [
        decide(task, empty[i * k : (i + 1) * k], gold[i * k : (i + 1) * k])
        for i, task in enumerate(tasks)
    ]


def decide(task: Task, empty: list[GradeResult], gold: list[GradeResult]) -> Derived:
    """Set the task's lists from its runs; `ok` when they make a valid task."""
    for r in empty + gold:
        if not r.tests:
            return Derived(task, False, f"a run reported no tests: {r.reason}")
    ids = set().union(*(r.tests for r in empty + gold))
    ids = {t for t in ids if well_formed(t)}

    def always(results: list[GradeResult], passed: bool) -> set[str]:
        return {t for t in ids if all((r.tests.get(t) == "PASSED") == passed for r in results)}

    task.FAIL_TO_PASS = sorted(always(empty, False) & always(gold, True))
    task.PASS_TO_PASS = sorted(always(empty, True) & always(gold, True))
    flaky = len(ids - always(empty, False) - always(empty, True)) + len(
        ids - always(gold, False) - always(gold, True))
    if not task.FAIL_TO_PASS or not task.PASS_TO_PASS:
        failing = [sorted(t for t, st in r.tests.items() if st != "PASSED") for r in empty + gold]
        return Derived(task, False, "needs >= 1 FAIL_TO_PASS and >= 1 PASS_TO_PASS (tests not "
                       f"passing per run, buggy then gold: {failing})"[:2000], flaky)
    for r in gold:
        if (g := regrade_from_log(task, r.log)).status != GradeStatus.resolved:
            return Derived(task, False, f"a gold run is not resolved ({g.status}: {g.reason})",
                           flaky)
    for r in empty:
        if (g := regrade_from_log(task, r.log)).status != GradeStatus.unresolved:
            return Derived(task, False, f"a buggy run is not unresolved ({g.status}: "
                           f"{g.reason})", flaky)
    return Derived(task, True, "", flaky)
