"""The live gold canary (`envs.grading.gold_canary_rate`): during `swefleet rl`, a share of the
episodes' grading runs also grade the task's gold patch (its record's `patch`) in a fresh
sandbox. A gold patch that does not resolve means the environment is broken for that task (an
image whose tests cannot pass any more, a grader regression), which the episodes alone would
only show as reward 0, like a bad policy.

Off the episode's critical path: the gold grade starts after the episode's own grade returned,
as a task of its own, on a grader of its own (its own pool, so it never takes an episode's
grading slot); it never touches a trajectory. Which grading runs are chosen is a seeded draw in
call order. At most `max_pending` gold grades wait or run at once; beyond that a chosen run is
skipped and counted. Gold grades still running when the run ends are abandoned with it.
"""

from __future__ import annotations

import asyncio
import logging
import random

from swefleet.envs.protocol import Grader

from swefleet.types import GradeCause, GradeStatus, Task

log = logging.getLogger(__name__)


class GoldCanary:
    """Grades gold patches beside the episodes; `step_metrics` reports them once per step."""

    def __init__(self, grader: Grader, rate: float, seed: int = 0, max_pending: int = 4):
        self.grader, self.rate, self.max_pending = grader, rate, max_pending
        self._rng = random.Random(seed)
        self._pending: set[asyncio.Task] = set()
        self._counts = {"runs": 0, "failures": 0, "infra_errors": 0, "skipped": 0}

    def after_grade(self, task: Task) -> None:
        """An episode of `task` was graded: grade its gold patch too when the draw says so (a
        task without one is never drawn for)."""
        if self.rate <= 0 or not task.patch.strip():
            return
        if self._rng.random() >= self.rate:
            return
        if len(self._pending) >= self.max_pending:
            self._counts["skipped"] += 1
            return
        job = asyncio.create_task(self._grade_gold(task), name=f"gold-{task.instance_id}")
        self._pending.add(job)
        job.add_done_callback(self._pending.discard)

    async def _grade_gold(self, task: Task) -> None:
        try:
            result = await self.grader.grade(task, task.patch)
        except Exception as e:  # noqa: BLE001 - one gold grade is its own unit of work
            self._infra(task, f"{type(e).__name__}: {e}")
            return
        if result.status == GradeStatus.error and result.cause == GradeCause.infra:
            self._infra(task, result.reason)
            return
        self._counts["runs"] += 1
        if result.status != GradeStatus.resolved:
            self._counts["failures"] += 1
            log.warning("gold canary: the gold patch of %s did not resolve (%s: %s): the "
                        "environment is broken for this task, its episodes cannot earn a reward",
                        task.instance_id, result.status.value, result.reason or "no reason")

    def _infra(self, task: Task, reason: str) -> None:
        self._counts["infra_errors"] += 1
        log.warning("gold canary: grading the gold patch of %s failed (infrastructure): %s",
                    task.instance_id, reason)

    @property
    def pending(self) -> int:
        """Gold grades waiting or running now."""
        return len(self._pending)

    async def drain(self) -> None:
        """Until every gold grade started so far has ended (tests; a run does not wait)."""
        while self._pending:
            await asyncio.gather(*self._pending, return_exceptions=True)

    def step_metrics(self) -> dict[str, float]:
        """The gold grades that ended since the previous record (`env/gold_canary_runs`,
        `env/gold_canary_failures`, `env/gold_canary_infra_errors`), chosen ones skipped as too
        many were pending (`env/gold_canary_skipped`), and those in flight now
        (`env/gold_canary_pending`); starts the next step's counts."""
        out = {f"env/gold_canary_{k}": float(v) for k, v in self._counts.items()}
        out["env/gold_canary_pending"] = float(self.pending)
        self._counts = dict.fromkeys(self._counts, 0)
        return out
