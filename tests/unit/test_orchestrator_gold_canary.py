"""The gold canary's choice (seeded draw), its limit on pending grades and its step metrics, with
a deterministic in-process grader (the Docker path: tests/integration/test_gold_canary.py)."""

import asyncio
from pathlib import Path

import pytest
from swefleet.orchestrator.gold_canary import GoldCanary

from swefleet.types import GradeCause, GradeResult, GradeStatus, Task

pytestmark = pytest.mark.unit
GOLD = "diff --git a/x.py b/x.py\n"
QUICKSTART = Path(__file__).resolve().parents[2] / "configs/quickstart.toml"


class PatchGrader:
    """Resolves the patch GOLD, fails any other, `infra` for the patch 'infra'; records calls."""

    def __init__(self, hold: asyncio.Event | None = None) -> None:
        self.graded: list[str] = []
        self.hold = hold

    async def grade(self, task: Task, model_patch: str) -> GradeResult:
        if self.hold is not None:
            await self.hold.wait()
        self.graded.append(task.instance_id)
        if model_patch == "infra":
            return GradeResult(instance_id=task.instance_id, status=GradeStatus.error,
                               cause=GradeCause.infra, reason="infra: engine gone")
        ok = model_patch == GOLD
        return GradeResult(instance_id=task.instance_id, cause=GradeCause.tests,
                           status=GradeStatus.resolved if ok else GradeStatus.unresolved)


def _task(name: str, patch: str = GOLD) -> Task:
    return Task(instance_id=name, repo="demo/demo", problem_statement="p", patch=patch)


async def _chosen(rate: float, seed: int, n: int = 40) -> list[str]:
    grader = PatchGrader()
    canary = GoldCanary(grader, rate, seed=seed, max_pending=n)
    for i in range(n):
        canary.after_grade(_task(f"t{i}"))
    await canary.drain()
    return sorted(grader.graded)


async def test_the_choice_is_a_seeded_draw():
    assert len(await _chosen(1.0, 0)) == 40 and await _chosen(0.0, 0) == []
    half = await _chosen(0.5, 7)
    assert 0 < len(half) < 40 and half == await _chosen(0.5, 7)  # same seed, same runs
    assert half != await _chosen(0.5, 8)


async def test_metrics_count_failures_infra_and_tasks_without_gold(caplog):
    grader = PatchGrader()
    canary = GoldCanary(grader, 1.0)
    for task in (_task("good"), _task("broken", "garbage"), _task("flaky", "infra"),
                 _task("no-gold", "")):
        canary.after_grade(task)
    await canary.drain()
    assert sorted(grader.graded) == ["broken", "flaky", "good"]  # no gold patch: not graded
    assert canary.step_metrics() == {
        "env/gold_canary_runs": 2.0, "env/gold_canary_failures": 1.0,
        "env/gold_canary_infra_errors": 1.0, "env/gold_canary_skipped": 0.0,
        "env/gold_canary_pending": 0.0}
    assert any("broken" in r.getMessage() and "did not resolve" in r.getMessage()
               for r in caplog.records)
    assert canary.step_metrics()["env/gold_canary_runs"] == 0.0  # counted once, per step


async def test_chosen_runs_past_the_pending_limit_are_skipped_and_counted():
    hold = asyncio.Event()
    canary = GoldCanary(PatchGrader(hold), 1.0, max_pending=2)
    for i in range(5):
        canary.after_grade(_task(f"t{i}"))
    metrics = canary.step_metrics()
    assert metrics["env/gold_canary_skipped"] == 3 and metrics["env/gold_canary_pending"] == 2
    hold.set()
    await canary.drain()
    assert canary.step_metrics()["env/gold_canary_runs"] == 2


def test_rl_runs_it_on_a_one_slot_grader_of_its_own_with_step_metrics():
    from contextlib import ExitStack

    from swefleet.app.config import load_config
    from swefleet.app.rl import _gold_canary

    on = load_config(QUICKSTART, ["envs.grading.gold_canary_rate=1.0"])
    step_metrics: list = []
    with ExitStack() as stack:
        canary = _gold_canary(on, "test-gold-wiring", stack, step_metrics)
        assert canary.rate == 1.0 and canary.grader._pool._max_workers == 1
        assert step_metrics == [canary.step_metrics]
    off = load_config(QUICKSTART, ["envs.grading.gold_canary_rate=0"])
    assert _gold_canary(off, "test-gold-off", ExitStack(), []) is None
