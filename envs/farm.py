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

Sandboxes are spread over the configured Docker hosts (`FarmConfig.hosts`, `envs.hosts`): each
goes to the least-loaded healthy host under its cap, its image copied there first if missing.
A host whose engine fails is drained: its sandboxes raise `HostLost` (episodes end
`infra_error`), new ones go elsewhere. Reaping, disk checks and cleanup run on every host.
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

from swefleet.envs import reaper
from swefleet.envs.config import FarmConfig, SandboxLimits
from swefleet.envs.diskwatch import DiskWatchdog
from swefleet.envs.hosts import Host, HostSet, engine_fault, record_run
from swefleet.envs.pool import PoolKey, WarmPool
from swefleet.envs.protocol import InfraError
from swefleet.envs.sandbox import DockerError, DockerSandbox, ImageMissing
from tenacity import AsyncRetrying, retry_if_exception, stop_after_attempt, wait_exponential

from swefleet.types import Task

log = logging.getLogger(__name__)


def _retryable(e: BaseException) -> bool:
    return isinstance(e, InfraError) and not isinstance(e, ImageMissing)


def _engine_failed(e: BaseException) -> bool:
    """Whether a creation failure is the engine's (unreachable, or a 5xx answer), not the
    container's or the request's (4xx: a container that died at start, a bad argument)."""
    return isinstance(e, InfraError) and engine_fault(e.__cause__)


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
    hosts_drained: int = 0
    host_lost: int = 0
    """Sandboxes failed because their host was drained."""

    step_peak_in_use: int = 0
    """Most sandboxes held at once since the last `step_metrics` call."""

    def metrics(self) -> dict[str, float]:
        """Namespaced counters for the metrics sink."""
        return {f"env/{k}": float(v) for k, v in asdict(self).items()}

    def acquired(self) -> None:
        """One more sandbox held."""
        self.in_use += 1
        self.peak_in_use = max(self.peak_in_use, self.in_use)
        self.step_peak_in_use = max(self.step_peak_in_use, self.in_use)

    def step_metrics(self) -> dict[str, float]:
        """A step record's sandbox figures (`env/sandboxes_held`: now; `env/sandboxes_held_peak`:
        the most at once since the previous record); starts the next step's peak."""
        out = {"env/sandboxes_held": float(self.in_use),
               "env/sandboxes_held_peak": float(self.step_peak_in_use)}
        self.step_peak_in_use = self.in_use
        return out


class FarmLifetime:
    """`async with farm:` starts the farm and closes it, whichever backend it is."""

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class DockerFarm(FarmLifetime):
    """Sandboxes for tasks; see the module docstring."""

    def __init__(self, run_id: str, config: FarmConfig | None = None, *, client: Any = None,
                 hosts: HostSet | None = None):
        """`client`: the Docker client of the local engine (no configured hosts); `hosts`: a
        `HostSet` shared with the grader (default: from `config`)."""
        self.run_id = run_id
        self.config = config or FarmConfig()
        self._own_hosts = hosts is None
        self.hosts = hosts or HostSet.from_config(self.config, client)
        self.hosts.listeners.append(self._on_drain)
        self._live: set[DockerSandbox] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
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
        self._health: asyncio.Task[None] | None = None
        self._closed = False

    @property
    def client(self) -> Any:
        """The Docker client of the first host (the local engine without configured hosts)."""
        return self.hosts.hosts[0].client()

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Reap containers of dead runs and start the periodic reaper (idempotent; `acquire`
        calls it)."""
        if self._reaper is not None:
            return
        if self._closed:
            raise RuntimeError("the farm is closed")
        self._loop = asyncio.get_running_loop()
        record_run(self.run_id, self.config.hosts)  # `swefleet clean` covers every host
        self._reaper = asyncio.ensure_future(self._reap_forever())
        self._diskwatcher = asyncio.ensure_future(self._watch_disk_forever())
        if not self.config.hosts:  # the local engine: its errors propagate, as ever
            removed = await asyncio.to_thread(reaper.reap_dead_runs, self.client, self.run_id)
            self.stats.reaped += len(removed)
            return
        self._health = asyncio.ensure_future(self._check_hosts_forever())
        await asyncio.to_thread(self.hosts.check)  # an engine that is down is drained first
        for host in self.hosts.healthy():
            await self._reap(host, expired=False)

    async def close(self) -> None:
        """Stop the reaper and the pool, wait for removals, then remove anything of this run."""
        self._closed = True
        loops = [t for t in (self._reaper, self._diskwatcher, self._health) if t is not None]
        for task in loops:
            task.cancel()
        await asyncio.gather(*loops, return_exceptions=True)
        await self.pool.close()
        await asyncio.gather(*list(self._cleanup), return_exceptions=True)
        self.stats.reaped += await asyncio.to_thread(self.remove_run_containers)
        if self._on_drain in self.hosts.listeners:
            self.hosts.listeners.remove(self._on_drain)
        if self._own_hosts and self.config.hosts:  # (a given client stays the caller's)
            await asyncio.to_thread(self.hosts.close)

    def remove_run_containers(self) -> int:
        """Remove every container of this run on every host it used (sync; usable from a signal
        handler/atexit). A drained host is tried only if it answers again."""
        removed = 0
        for host in self._used_hosts():
            if host.drained and host.probe():
                log.warning("not cleaning drained host %s (no answer); `swefleet clean %s` "
                            "later", host.name, self.run_id)
                continue
            try:
                removed += reaper.remove_run_containers(self.run_id, host.client())
            except Exception as e:  # noqa: BLE001 - clean the other hosts; this one is reported
                log.warning("could not clean host %s: %s: %s", host.name, type(e).__name__, e)
        return removed

    def _used_hosts(self) -> list[Host]:
        return [h for h in self.hosts.hosts if h.connected]

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.reap_interval_s)
            self.pool.expire()
            for host in self.hosts.healthy():
                await self._reap(host)

    async def _reap(self, host: Host, expired: bool = True) -> None:
        """Containers of dead runs (and, with `expired`, past their lifetime) on `host`."""
        try:
            if expired:
                self.stats.reaped += len(await asyncio.to_thread(
                    reaper.reap_expired, host.client(), self.config.reap_grace_s
                ))
            self.stats.reaped += len(await asyncio.to_thread(
                reaper.reap_dead_runs, host.client(), self.run_id
            ))
        except Exception as e:  # noqa: BLE001 - a daemon hiccup must not stop the run
            log.warning("reaper pass on %s failed: %s: %s", host.name, type(e).__name__, e)

    async def _check_hosts_forever(self) -> None:
        while True:
            await asyncio.sleep(self.config.host_check_interval_s)
            await asyncio.to_thread(self.hosts.check)

    def _on_drain(self, host: Host) -> None:
        """`HostSet` listener (any thread): fail this farm's sandboxes on `host`."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._fail_sandboxes_on, host)

    def _fail_sandboxes_on(self, host: Host) -> None:
        self.stats.hosts_drained += 1
        for sb in [sb for sb in self._live if sb.host is host]:
            if not sb.host_lost:
                self.stats.host_lost += 1
            sb.mark_host_lost(f"{host.name}: {host.drained}")

    def _on_engine_error(self, host: Host, error: BaseException) -> None:
        self._track(asyncio.to_thread(self.hosts.engine_error, host, error))

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
            self.stats.acquired()
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
                from swefleet.envs.images import DEFAULT_BASE_IMAGE, ensure_task_image

                patch = Path(patch_file).read_bytes() if patch_file else b""
                self._images[key] = await asyncio.to_thread(
                    ensure_task_image, task, Path(task.source_dir), DEFAULT_BASE_IMAGE, patch
                )
        return self._images[key]

    async def _create(self, key: PoolKey, instance_id: str = "") -> DockerSandbox:
        image = key[0]
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
                    sb = await self._create_on_a_host(key, instance_id)
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

    async def _create_on_a_host(self, key: PoolKey, instance_id: str) -> DockerSandbox:
        """One attempt: a slot on the least-loaded healthy host, the image there, a sandbox.
        An engine failure counts against the host (it may be drained: the retry goes
        elsewhere)."""
        image, limits, workdir = key
        host = await self.hosts.reserve_wait()
        try:
            try:
                await asyncio.to_thread(self.hosts.ensure_image, host, image)
            except LookupError as e:
                raise ImageMissing(str(e)) from e
            except Exception as e:  # the copy failed: an engine's doing
                raise DockerError(f"image {image} to {host.name}: {type(e).__name__}: {e}") from e
            run = await self._runnable(host, image, workdir, limits)
            await self._rate.wait()
            sb = await self._create_once(
                host.client(), run.image, run_id=self.run_id, config=self.config,
                limits=limits if run.user == limits.user else
                limits.model_copy(update={"user": run.user}),
                workdir=workdir, instance_id=instance_id,
            )
            sb.image_user = run.how
        except BaseException as e:
            self.hosts.release(host)
            if _engine_failed(e):
                await asyncio.to_thread(self.hosts.engine_error, host, e)
            raise
        self.hosts.engine_ok(host)
        sb.host, sb.on_engine_error = host, lambda err: self._on_engine_error(host, err)
        self._live.add(sb)
        if host.drained:  # drained while this one was made
            sb.mark_host_lost(f"{host.name}: {host.drained}")
        return sb

    async def _runnable(self, host: Any, image: str, workdir: str, limits: SandboxLimits) -> Any:
        """How `image` runs on `host` (`FarmConfig.image_user`): `envs.derived_image.prepare`,
        which builds the derived layer there the first time."""
        from swefleet.envs.derived_image import DeriveError, prepare

        try:
            return await asyncio.to_thread(
                prepare, host.client(), image, workdir, self.config.image_user, limits.user
            )
        except DeriveError:
            raise
        except Exception as e:  # the engine failed the inspection or the build
            raise DockerError(f"prepare {image} on {host.name}: {type(e).__name__}: {e}") from e

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
            if sb.host is not None and sb.host.drained:  # no engine to ask; swept by label
                sb.closed = True
                await sb.session.close()
                self.stats.remove_errors += 1
                return
            await sb.close()
            self.stats.removed += 1
        except InfraError as e:  # the reaper and close() sweep by label later
            self.stats.remove_errors += 1
            log.warning("could not remove sandbox %s: %s", sb.container_id[:12], e)
        finally:
            if sb in self._live:
                self._live.discard(sb)
                self.hosts.release(sb.host)
