"""Disk budget against a real Docker daemon: many files, each under the per-file cap, past a
small budget get the sandbox removed by the farm's watchdog; the episode ends `limit_disk`
(scored, not infra); neighbours keep working; nothing is left behind."""

from __future__ import annotations

import asyncio
import time
import uuid

import docker.errors
import pytest
from swefleet.envs import containers, reaper
from swefleet.envs.config import FarmConfig, SandboxLimits
from swefleet.envs.farm import DockerFarm
from swefleet.envs.protocol import DiskBudgetExceeded, InfraError

from swefleet.types import EpisodeStatus

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]
LIMITS = SandboxLimits(memory_mb=256, pids_limit=128, lifetime_s=600, max_file_mb=8)
INTERVAL_S = 0.5
BUDGET = {"disk_budget_mb": 64}
#: 40 files of 7 MiB (each under max_file_mb=8), 0.1 s apart: 280 MiB if nothing stops it.
FILL = "for i in $(seq 1 40); do head -c 7M /dev/zero > /tmp/fill$i || exit 9; sleep 0.1; done"


def _farm(**kw) -> DockerFarm:
    cfg = FarmConfig(limits=LIMITS, create_rate_per_s=50, disk_check_interval_s=INTERVAL_S, **kw)
    return DockerFarm(f"test-disk-{uuid.uuid4().hex[:8]}", cfg)


@pytest.fixture(scope="module")
def client():
    return containers.docker_client()


async def _gone(client, container_id: str, within_s: float = 10.0) -> bool:
    """Whether the container is removed within `within_s` (the force-removal may still run when
    the sandbox has already seen its shell die)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            client.api.inspect_container(container_id)
        except docker.errors.NotFound:
            return True
        await asyncio.sleep(0.1)
    return False


async def test_many_files_past_the_budget_remove_only_that_sandbox(client, envs_tiny_task):
    task = envs_tiny_task.model_copy(update={"sandbox": BUDGET})  # per-task override
    async with _farm() as farm:
        async with farm.acquire(task) as hog, farm.acquire(task) as neighbour:
            assert hog.limits.disk_budget_mb == 64 and len(farm.diskwatch) == 2
            small = await neighbour.run("head -c 7M /dev/zero > /tmp/a && head -c 7M "
                                        "/dev/zero > /tmp/b && echo ok")
            assert small.output == "ok\n"  # 14 MiB: under budget
            t0 = time.monotonic()
            with pytest.raises(DiskBudgetExceeded, match="disk budget exceeded") as err:
                await hog.run(FILL, timeout_s=60)
            took = time.monotonic() - t0
            assert not isinstance(err.value, InfraError)
            # 64 MiB is passed after ~10 files (~1-2 s here); a few check intervals later it is
            # removed, long before the 40 files (>= 4 s of sleeps alone) are written
            assert took < 4.0, took
            assert await _gone(client, hog.container_id)
            for step in (hog.run("echo hi"), hog.read_file("calc.py"), hog.diff(),
                         hog.write_file("x", b"x"), hog.exec("true")):
                with pytest.raises(DiskBudgetExceeded):
                    await step
            await asyncio.sleep(3 * INTERVAL_S)  # the neighbour is measured, not removed
            assert (await neighbour.run("ls /tmp | wc -l")).output.strip() == "2"
            assert farm.stats.disk_kills == 1 and farm.diskwatch.checks >= 2
        assert not reaper.leftover_containers(client, farm.run_id)
    assert not reaper.leftover_containers(client, farm.run_id)


async def test_no_budget_means_no_watch(client, envs_tiny_task):
    task = envs_tiny_task.model_copy(update={"sandbox": {"disk_budget_mb": None}})
    async with _farm() as farm:
        async with farm.acquire(task) as sb:
            assert len(farm.diskwatch) == 0
            await sb.run("for i in 1 2 3 4 5 6 7 8 9 10; do head -c 7M /dev/zero > /tmp/f$i; "
                         "done")
            await asyncio.sleep(3 * INTERVAL_S)
            assert (await sb.run("ls /tmp/f* | wc -l")).output.strip() == "10"
        assert farm.stats.disk_kills == 0
    assert not reaper.leftover_containers(client, farm.run_id)


# ---------------------------------------------------------------- the episode's outcome


class _NoGrader:
    async def grade(self, task, model_patch):
        raise AssertionError("a limit_disk episode has nothing to grade")


async def test_episode_ends_limit_disk_scored_zero_not_infra(client, tok, envs_tiny_task):
    from swefleet.agents.config import AgentConfig
    from swefleet.agents.scripted import ScriptedModel
    from swefleet.orchestrator.advantages import is_scored
    from swefleet.orchestrator.rollout import RolloutContext, RolloutHandle, run_rollout

    from swefleet.types import NON_SCORABLE

    task = envs_tiny_task.model_copy(update={"sandbox": BUDGET})
    script = [f"Fill it.\n```bash\n{FILL}\n```"] + ["Again.\n```bash\necho still here\n```"] * 5
    sunk = []
    async with _farm() as farm:
        ctx = RolloutContext(farm=farm, grader=_NoGrader(), model=ScriptedModel(tok, script),
                             tokenizer=tok, agent=AgentConfig(command_timeout_s=60, max_steps=6))
        traj = await run_rollout(ctx, task, RolloutHandle("ep-disk", 0), "g", sunk.append)
    assert traj.status == EpisodeStatus.limit_disk, (traj.status, traj.reason)
    assert traj.status not in NON_SCORABLE and "disk budget exceeded" in traj.reason
    assert traj.reward == 0.0 and is_scored(traj) and len(traj.turns) == 1
    assert sunk == [traj] and farm.stats.disk_kills == 1
    assert not reaper.leftover_containers(client, farm.run_id)
