"""DockerFarm against a real Docker daemon: cap, warm pool, cleanup on cancel, retries, reaper."""

from __future__ import annotations

import asyncio
import io
import subprocess
import tarfile
import time
import uuid

import pytest
from swefleet.envs import containers, reaper
from swefleet.envs.config import FarmConfig, SandboxLimits
from swefleet.envs.farm import DockerFarm
from swefleet.envs.protocol import InfraError
from swefleet.envs.sandbox import ImageMissing

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]
LIMITS = SandboxLimits(memory_mb=256, pids_limit=128, lifetime_s=600)


def _cfg(**kw) -> FarmConfig:
    return FarmConfig(limits=LIMITS, create_rate_per_s=50, **kw)


def _run_id() -> str:
    return f"test-farm-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def client():
    return containers.docker_client()


def _alive(client, run_id: str) -> list[str]:
    return reaper.leftover_containers(client, run_id)


async def test_concurrency_cap_and_per_task_limits(client, envs_tiny_task):
    task = envs_tiny_task.model_copy(update={"sandbox": {"memory_mb": 300}})
    farm = DockerFarm(_run_id(), _cfg(max_concurrent=2))
    inside, peak = 0, 0

    async def episode() -> None:
        nonlocal inside, peak
        async with farm.acquire(task) as sb:
            inside += 1
            peak = max(peak, inside)
            assert (await sb.run("echo hi")).output == "hi\n"
            deadline = time.monotonic() + 30  # stay until two are inside at once (or give up)
            while peak < 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.05)
            await asyncio.sleep(0.2)
            inside -= 1

    async with farm:
        await asyncio.gather(*(episode() for _ in range(4)))
        step = farm.stats.step_metrics()
        assert step == {"env/sandboxes_held": 0.0, "env/sandboxes_held_peak": 2.0}
        async with farm.acquire(task) as sb:
            assert farm.stats.step_metrics()["env/sandboxes_held_peak"] == 1.0  # a new step
            info = client.api.inspect_container(sb.container_id)
            assert info["HostConfig"]["Memory"] == 300 * 2**20
    assert peak == 2 and farm.stats.peak_in_use == 2 and farm.stats.created == 5
    assert not _alive(client, farm.run_id)


async def test_warm_pool_is_faster_than_cold(client, envs_tiny_task):
    farm = DockerFarm(_run_id(), _cfg(warm_pool_size=1, warm_ttl_s=120))
    async with farm:
        t0 = time.monotonic()
        async with farm.acquire(envs_tiny_task) as sb:
            cold = time.monotonic() - t0
            await sb.run("touch /tmp/dirty")
        key = (envs_tiny_task.image, LIMITS, envs_tiny_task.workdir)
        deadline = time.monotonic() + 30
        while farm.pool.idle(key) < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        t0 = time.monotonic()
        async with farm.acquire(envs_tiny_task) as sb:
            warm = time.monotonic() - t0
            r = await sb.run("test -e /tmp/dirty && echo reused || echo fresh")
            assert r.output == "fresh\n"  # a warm sandbox is never a used one
    assert farm.stats.warm_hits == 1 and farm.stats.cold_starts == 1
    assert warm < cold / 3 and warm < 0.2, (warm, cold)
    assert not _alive(client, farm.run_id)


async def test_sandbox_removed_when_episode_is_cancelled(client, envs_tiny_task):
    farm = DockerFarm(_run_id(), _cfg())
    entered = asyncio.Event()
    ids: list[str] = []

    async def episode() -> None:
        async with farm.acquire(envs_tiny_task) as sb:
            ids.append(sb.container_id)
            entered.set()
            await sb.run("sleep 100", timeout_s=200)

    async with farm:
        task = asyncio.ensure_future(episode())
        await asyncio.wait_for(entered.wait(), 60)
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not _alive(client, farm.run_id)  # removed before the farm closes
        # cancelled while the container is being created: nothing is left either
        late = asyncio.ensure_future(episode())
        await asyncio.sleep(0.05)
        late.cancel()
        await asyncio.gather(late, return_exceptions=True)
    assert not _alive(client, farm.run_id)


def _empty_image(client) -> str:
    """An image with no `sleep` at all: every container fails to start (an infra failure)."""
    from swefleet.envs.images import image_exists

    if image_exists("swefleet-test-empty:v1"):
        return "swefleet-test-empty:v1"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("README")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"empty"))
    client.api.import_image_from_data(buf.getvalue(), repository="swefleet-test-empty", tag="v1")
    return "swefleet-test-empty:v1"


async def test_infra_failures_are_retried_then_raised(client, envs_tiny_task):
    broken = envs_tiny_task.model_copy(update={"image": _empty_image(client)})
    missing = envs_tiny_task.model_copy(update={"image": "swefleet-test-missing:none"})
    async with DockerFarm(_run_id(), _cfg(create_attempts=2)) as farm:
        with pytest.raises(InfraError, match="after 2 attempts"):
            async with farm.acquire(broken):
                pass
        assert farm.stats.create_retries == 1
        with pytest.raises(ImageMissing):  # not retried: it cannot get better
            async with farm.acquire(missing):
                pass
        assert farm.stats.create_retries == 1
    assert not _alive(client, farm.run_id)


def _dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def _orphan(client, image: str, run_id: str, **labels: str) -> str:
    """A container labelled as if another process had created it."""
    lab = {**containers.sandbox_labels(run_id, 600), **labels}
    kwargs = containers.run_kwargs(image, LIMITS, lab)
    container = client.containers.create(**kwargs)
    container.start()
    return container.id


async def test_reaper_removes_dead_runs_and_expired_containers(client, envs_tiny_task):
    image = envs_tiny_task.image
    dead = _orphan(client, image, _run_id(), **{containers.LABEL_OWNER_PID: str(_dead_pid())})
    reused = _orphan(client, image, _run_id(), **{containers.LABEL_OWNER_START: "1"})
    live_run = _run_id()
    live = _orphan(client, image, live_run)  # owned by this (living) process
    expired = _orphan(client, image, live_run, **{containers.LABEL_EXPIRES: "1000"})
    try:
        async with DockerFarm(_run_id(), _cfg()) as farm:  # start() reaps dead runs
            existing = set(reaper.leftover_containers(client))
            assert dead not in existing and reused not in existing
            assert live in existing and expired in existing
            assert farm.stats.reaped >= 2
        assert expired in reaper.reap_expired(client, grace_s=0)
        assert _alive(client, live_run) == [live]
        assert reaper.remove_run_containers(live_run) == 1
        assert not _alive(client, live_run)
    finally:
        for cid in (dead, reused, live, expired):
            containers.remove_container(client, cid)


async def test_remove_run_containers_is_sync_and_total(client, envs_tiny_task):
    farm = DockerFarm(_run_id(), _cfg())
    async with farm.acquire(envs_tiny_task), farm.acquire(envs_tiny_task):
        assert len(_alive(client, farm.run_id)) == 2
        assert farm.remove_run_containers() == 2  # e.g. from a signal handler
        assert not _alive(client, farm.run_id)
    await farm.close()
    assert farm.stats.remove_errors == 0
