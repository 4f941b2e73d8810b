"""`BwrapFarm`: the `Farm` protocol over bubblewrap sandboxes (no Docker engine needed once the
root filesystems are cached; see `envs/bwrap/rootfs.py`).

    async with BwrapFarm("run-42", FarmConfig(backend="bwrap")) as farm:
        async with farm.acquire(task) as sb:
            await sb.run("pytest -x")

A sandbox is a process tree of this process (its PID 1 ends with the lifetime or when this
process dies), so there is nothing to reap across runs and no warm pool (a start takes ~0.1 s
plus the copy of the workdir). Failed starts are retried `create_attempts` times.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from swefleet.envs.bwrap.box import check_tools
from swefleet.envs.bwrap.sandbox import BwrapSandbox
from swefleet.envs.config import FarmConfig, SandboxLimits
from swefleet.envs.farm import DockerFarm, FarmLifetime, FarmStats
from swefleet.envs.protocol import InfraError

from swefleet.types import Task

log = logging.getLogger(__name__)


class BwrapFarm(FarmLifetime):
    """Sandboxes for tasks; see the module docstring."""

    def __init__(self, run_id: str, config: FarmConfig | None = None) -> None:
        self.run_id = run_id
        self.config = config or FarmConfig(backend="bwrap")
        self._slots = asyncio.Semaphore(self.config.max_concurrent)
        self.stats = FarmStats()
        self._images: dict[str, str] = {}
        self._image_lock = asyncio.Lock()
        self._live: set[BwrapSandbox] = set()

    image_for = DockerFarm.image_for  # the task's image (built with Docker from source_dir)

    async def start(self) -> None:
        check_tools(self.config.bwrap.bwrap_path)

    async def close(self) -> None:
        """Remove every sandbox still out (normally none: `acquire` removes its own)."""
        await asyncio.gather(*(sb.close() for sb in list(self._live)), return_exceptions=True)

    @asynccontextmanager
    async def acquire(self, task: Task) -> AsyncIterator[BwrapSandbox]:
        """A fresh sandbox for `task`; removed when the block exits (also on cancellation)."""
        image = await self.image_for(task)
        limits = SandboxLimits.for_task(self.config.limits, task)
        async with self._slots:
            sb = await self._create(image, limits, task)
            self._live.add(sb)
            self.stats.acquired()
            try:
                yield sb
            finally:
                self.stats.in_use -= 1
                self._live.discard(sb)
                await asyncio.shield(sb.close())
                self.stats.removed += 1

    async def prewarm(self, tasks: list[Task]) -> None:
        """No warm pool here: exports the tasks' root filesystems ahead instead."""
        from swefleet.envs.bwrap.rootfs import ensure_rootfs

        for task in tasks:
            image = await self.image_for(task)
            await asyncio.to_thread(ensure_rootfs, image, self.config.bwrap.cache_dir)

    async def _create(self, image: str, limits: SandboxLimits, task: Task) -> BwrapSandbox:
        for attempt in range(1, self.config.create_attempts + 1):
            try:
                sb = await BwrapSandbox.create(
                    image, run_id=self.run_id, config=self.config, limits=limits,
                    workdir=task.workdir, instance_id=task.instance_id)
                self.stats.created += 1
                self.stats.cold_starts += 1
                return sb
            except InfraError as e:
                if attempt == self.config.create_attempts:
                    self.stats.create_failures += 1
                    raise InfraError(f"no sandbox for {image} after {attempt} attempts: {e}") from e
                self.stats.create_retries += 1
                log.warning("sandbox creation failed (attempt %d), retrying: %s", attempt, e)
                await asyncio.sleep(0.5 * attempt)
        raise AssertionError("unreachable")
