"""`DockerFarm`: hands out sandboxes (the `Farm` protocol) under a concurrency cap and a creation
rate limit, from a warm pool when one is ready, and reaps what dead runs left behind.

    farm = DockerFarm("run-42", FarmConfig(max_concurrent=16, warm_pool_size=2))
    async with farm.acquire(task) as sb:      # removed on exit, also on cancellation
        await sb.run("pytest -x")
    await farm.close()                         # or `async with DockerFarm(...) as farm`

Creation failures (daemon errors, a container that dies during start-up) are retried with
tenacity; when retries run out `acquire` raises `InfraError`, never a model failure. Sandboxes
in use are watched for their disk budget (`envs.diskwatch`): one over it is removed and raises
`DiskBudgetExceeded`, a policy failure.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Self

from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from envs import containers, reaper
from envs.config import FarmConfig, SandboxLimits
from envs.diskwatch import DiskWatchdog
from envs.pool import PoolKey, WarmPool
from envs.protocol import InfraError
from envs.sandbox import DockerSandbox, ImageMissing
from swefleet.types import Task

log = logging.getLogger(__name__)


def _retryable(e: BaseException) -> bool:
    return isinstance(e, InfraError) and not isinstance(e, ImageMissing)


class RateLimiter:
    """At most `rate` events per second, evenly spaced (no bursts)."""

    def __init__(self, rate: float) -> None:
        self._interval = 1.0 / rate
        self._next = 0.0

    async def wait(self) -> None:
        now = time.monotonic()
        at = max(now, self._next)
        self._next = at + self._interval
        if at > now:
            await asyncio.sleep(at - now)


@dataclass
class FarmStats:
    created: int = 0
    create_retries: int = 0
    create_failures: int = 0
    warm_hits: int = 0
    cold_starts: int = 0
    removed: int = 0
    remove_errors: int = 0
    reaped: int = 0
    disk_kills: int = 0
    in_use: int = 0
    peak_in_use: int = 0

    def metrics(self) -> dict[str, float]:
        """Namespaced counters for the metrics sink."""
        return {f"env/{k}": float(v) for k, v in asdict(self).items()}


class FarmLifetime:
    """`async with farm:` starts the farm and closes it, whichever backend it is."""

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class DockerFarm(FarmLifetime):
    """Sandboxes for tasks; see the module docstring."""

    def __init__(self, run_id: str, config: FarmConfig | None = None, *, client: Any = None):
        self.run_id = run_id
        self.config = config or FarmConfig()
        self._client = client
        self._slots = asyncio.Semaphore(self.config.max_concurrent)
        self._rate = RateLimiter(self.config.create_rate_per_s)
        self.pool = WarmPool(
            self.config.warm_pool_size, self.config.warm_ttl_s, self._make_warm, self._discard
        )
        self.stats = FarmStats()
        self._images: dict[str, str] = {}
        self._image_lock = asyncio.Lock()
        self._cleanup: set[asyncio.Task[None]] = set()
        self._reaper: asyncio.Task[None] | None = None
        self.diskwatch = DiskWatchdog(lambda: self.client, run_id)
        self._diskwatcher: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = containers.docker_client(
                self.config.docker_timeout_s, max_pool_size=2 * self.config.max_concurrent + 8
            )
        return self._client

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Reap containers of dead runs and start the periodic reaper (idempotent; `acquire`
        calls it)."""
        if self._reaper is not None:
            return
        if self._closed:
            raise RuntimeError("the farm is closed")
        self._reaper = asyncio.ensure_future(self._reap_forever())
        self._diskwatcher = asyncio.ensure_future(self._watch_disk_forever())
        removed = await asyncio.to_thread(reaper.reap_dead_runs, self.client, self.run_id)
        self.stats.reaped += len(removed)

    async def close(self) -> None:
        """Stop the reaper and the pool, wait for removals, then remove anything of this run."""
        self._closed = True
        loops = [t for t in (self._reaper, self._diskwatcher) if t is not None]
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        await self.pool.close()
        await asyncio.gather(*list(self._cleanup), return_exceptions=True)
        if self._client is not None:
            self.stats.reaped += await asyncio.to_thread(self.remove_run_containers)

    def remove_run_containers(self) -> int:
        """Remove every container of this run (sync; usable from a signal handler/atexit)."""
        return reaper.remove_run_containers(self.run_id, self._client)

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.reap_interval_s)
            self.pool.expire()
            try:
                for removed in (
                    await asyncio.to_thread(
                        reaper.reap_expired, self.client, self.config.reap_grace_s
                    ),
                    await asyncio.to_thread(reaper.reap_dead_runs, self.client, self.run_id),
                ):
                    self.stats.reaped += len(removed)
            except Exception as e:  # noqa: BLE001 - a daemon hiccup must not stop the run
                log.warning("reaper pass failed: %s: %s", type(e).__name__, e)

    async def _watch_disk_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.disk_check_interval_s)
            try:
                self.stats.disk_kills += len(await self.diskwatch.check())
            except Exception as e:  # noqa: BLE001 - a daemon hiccup must not stop the run
                log.warning("disk budget check failed: %s: %s", type(e).__name__, e)

    # -- acquire ---------------------------------------------------------------------------

    @asynccontextmanager
    async def acquire(self, task: Task) -> AsyncIterator[DockerSandbox]:
        """A fresh sandbox for `task` (warm if one is ready); removed when the block exits."""
        await self.start()
        image = await self.image_for(task)
        key: PoolKey = (image, SandboxLimits.for_task(self.config.limits, task), task.workdir)
        async with self._slots:
            sb = self.pool.take(key)
            if sb is not None:
                self.stats.warm_hits += 1
            else:
                self.stats.cold_starts += 1
                sb = await self._create(key, task.instance_id)
            self.stats.in_use += 1
            self.stats.peak_in_use = max(self.stats.peak_in_use, self.stats.in_use)
            self.diskwatch.watch(sb)
            try:
                yield sb
            finally:
                self.stats.in_use -= 1
                self.diskwatch.unwatch(sb)
                await self._release(sb)

    async def prewarm(self, tasks: list[Task]) -> None:
        """Start filling the warm pool for these tasks' images (returns at once)."""
        await self.start()
        for task in tasks:
            image = await self.image_for(task)
            limits = SandboxLimits.for_task(self.config.limits, task)
            self.pool.refill((image, limits, task.workdir))

    async def image_for(self, task: Task) -> str:
        """`task.image`, or the image built from `task.source_dir` (+ its `source_patch`; paths
        as given, usually made absolute by `envs.tasks.prepare_task_images`'s caller)."""
        if task.image:
            return task.image
        if not task.source_dir:
            raise ValueError(f"task {task.instance_id} has neither `image` nor `source_dir`")
        patch_file = (task.model_extra or {}).get("source_patch") or ""
        key = f"{task.source_dir}\0{patch_file}"
        async with self._image_lock:
            if key not in self._images:
                from envs.images import DEFAULT_BASE_IMAGE, ensure_task_image

                patch = Path(patch_file).read_bytes() if patch_file else b""
                self._images[key] = await asyncio.to_thread(
                    ensure_task_image, task, Path(task.source_dir), DEFAULT_BASE_IMAGE, patch
                )
        return self._images[key]

    async def _create(self, key: PoolKey, instance_id: str = "") -> DockerSandbox:
        image, limits, workdir = key
        retrying = AsyncRetrying(
            stop=stop_after_attempt(self.config.create_attempts),
            wait=wait_exponential(multiplier=0.5, max=10),
            retry=retry_if_exception(_retryable),
            before_sleep=self._on_retry,
            reraise=True,
        )
        try:
            async for attempt in retrying:
                with attempt:
                    await self._rate.wait()
                    sb = await self._create_once(
                        self.client,
                        image,
                        run_id=self.run_id,
                        config=self.config,
                        limits=limits,
                        workdir=workdir,
                        instance_id=instance_id,
                    )
        except InfraError as e:
            self.stats.create_failures += 1
            if isinstance(e, ImageMissing):
                raise
            raise InfraError(
                f"no sandbox for {image} after {self.config.create_attempts} attempts: "
                f"{type(e).__name__}: {e}"
            ) from e
        self.stats.created += 1
        return sb

    async def _create_once(self, *args: Any, **kwargs: Any) -> DockerSandbox:
        """`DockerSandbox.create`, but a cancelled caller leaves a tracked removal behind (so
        `close()` waits until a container that was still being made is gone)."""
        task = asyncio.ensure_future(DockerSandbox.create(*args, **kwargs))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            self._track(self._discard_when_made(task))
            raise

    async def _discard_when_made(self, task: asyncio.Future[DockerSandbox]) -> None:
        try:
            sb = await task
        except BaseException:  # noqa: BLE001 - failed creations clean up after themselves
            return
        await self._discard(sb)

    def _track(self, coro: Any) -> asyncio.Task[None]:
        task = asyncio.ensure_future(coro)
        self._cleanup.add(task)
        task.add_done_callback(self._cleanup.discard)
        return task

    def _on_retry(self, state: Any) -> None:
        self.stats.create_retries += 1
        exc = state.outcome.exception() if state.outcome else None
        log.warning("sandbox creation failed (attempt %d), retrying: %s", state.attempt_number, exc)

    async def _make_warm(self, key: PoolKey) -> DockerSandbox:
        return await self._create(key)

    async def _release(self, sb: DockerSandbox) -> None:
        """Remove `sb`; survives cancellation of the caller (close() waits for it)."""
        await asyncio.shield(self._track(self._discard(sb)))

    async def _discard(self, sb: DockerSandbox) -> None:
        try:
            await sb.close()
            self.stats.removed += 1
        except InfraError as e:  # the reaper and close() sweep by label later
            self.stats.remove_errors += 1
            log.warning("could not remove sandbox %s: %s", sb.container_id[:12], e)
