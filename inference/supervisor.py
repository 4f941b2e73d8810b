"""Keep a launched fleet serving: restart dead servers with the current weights.

    supervisor = Supervisor(servers, fleet, config, model_dir)   # version 0 = model_dir
    supervisor.start()
    await supervisor.update_weights(v, weights_dir)   # instead of fleet.update_weights
    result = await supervisor.guard(work())           # NoServersLeft when the last one is lost

Every `health_interval_s` each launched server is checked: its process exited, or `/health`
failed `HEALTH_FAILURES` times in a row, means dead. A server that refuses or loses a
connection in between (a request, the fleet's /health round) is checked at once, requests
waiting meanwhile: if its process exits within `EXIT_GRACE_S` it is dead (otherwise the
requests go on as before). A dead server leaves service at once (no
request is routed to it, no weight update sent: `ServerState.in_service`; requests that find no
server in service wait while one is restarting) and is restarted on
its port (`ServerFleet.respawn`) with the current weights: those of the last `update_weights`
call (the run's model before any). An embedded server starts on them at their version. A vLLM
server starts on the directory the fleet was launched on (vLLM keys its compile cache by the
model path, so a restart loads the compiled graphs instead of compiling again) and gets the
current weights and version through the fleet client's update path. If the weights moved on
while it started, it is updated to the newest before it rejoins the fleet. Restarts are counted
(`infer/server_restarts`) and timed from the death's detection to the server back in service
(`infer/server_restart_s`, the last one; `infer/server_restart_s_max`). With `restart_dead_servers` off, or when a
restart fails, the server is given up (`infer/servers_lost`); the work goes on with the others
and `guard` raises `NoServersLeft` once none is left.

A weight update that fails only on servers whose process died (or exits within
`EXIT_GRACE_S`) is not an error: those are restarted with the new weights.

Weight sync by broadcast (`inference/weight_sync.py`): most versions are only broadcast (a marker
without a directory), so a server restarts on the newest weights DIRECTORY (the last update that
had one; the run's model before any). A restarted process is in no transfer group, so a dead
server makes the supervisor call `new_group_epoch` (the run announces the next epoch of the
trainer's group: `orchestrator/weight_sync.py`): the trainer and every server join it at the
next broadcast. A restarted server behind a broadcast-only version stays out of service until
that broadcast: the next update waits for restarts in progress, sends to it too, and brings it
back into service at the new version.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TypeVar

import httpx
from swefleet.inference.config import InferenceConfig
from swefleet.inference.fleet import FleetClient, WeightUpdateError
from swefleet.inference.fleet_launch import ServerFleet
from swefleet.inference.routing import ServerState

log = logging.getLogger(__name__)
T = TypeVar("T")
HEALTH_FAILURES = 3
#: how long a server whose connection broke (a request, a /health round, a weight update) may
#: take to be seen exited: a killed process closes its sockets before its parent can reap it
EXIT_GRACE_S = 2.0


class NoServersLeft(RuntimeError):
    """Every inference server died and none could be restarted."""


def weights_dir(path: Path) -> Path | None:
    """The checkpoint directory of an update's `path`: the directory itself, or the one a
    broadcast marker names; None for a broadcast-only version."""
    from swefleet.weight_transfer import is_marker, read_marker

    if not is_marker(path):
        return path
    marker = read_marker(path)
    return None if marker.path is None else path.parent / marker.path


class Supervisor:
    """Health checks, restarts and weight updates of one `ServerFleet` seen by one client."""

    def __init__(
        self,
        servers: ServerFleet,
        fleet: FleetClient,
        config: InferenceConfig,
        model_dir: str | Path,
        version: int = 0,
        *,
        new_group_epoch: Callable[[], object] | None = None,
    ) -> None:
        self.servers, self.fleet, self.config = servers, fleet, config
        self.target = (version, Path(model_dir))
        """(version, path) every server should serve: the last update's (maybe a marker)."""
        self.dir_target = self.target
        """(version, weights dir) of the last update that had a directory: restarts start there."""
        self.launch = self.target
        """(version, dir) the servers were first started on: a vLLM server restarts there, so
        its compile cache (keyed by vLLM on the model path among other things) is hit, then
        catches up to `target` by the update path."""
        self.restart_seconds: list[float] = []
        """Seconds from each death's detection to the server back in service."""
        self.new_group_epoch = new_group_epoch
        """Weight sync by broadcast: announces the next epoch of the trainer's transfer group."""
        self.restarts = 0
        self._behind: set[int] = set()
        """Restarted servers out of service until the next broadcast brings them up to date."""
        self.lost: set[int] = set()
        self._failures = [0] * len(servers.specs)
        self._restarting: dict[int, asyncio.Task] = {}
        self._suspects: dict[int, asyncio.Task] = {}
        """Servers that refused a connection, being checked for a dead process."""
        self._lock = asyncio.Lock()
        self._none_left = asyncio.Event()
        self._watch: asyncio.Task | None = None
        self._http: httpx.AsyncClient | None = None

    def start(self) -> None:
        """Begin the health checks (nothing to do for external servers)."""
        if self.servers.launched and self._watch is None:
            timeout = max(5.0, 2 * self.config.health_interval_s)
            self._http = httpx.AsyncClient(trust_env=False, timeout=timeout)
            self._watch = asyncio.create_task(self._watch_loop(), name="fleet-supervisor")
            self.fleet.watch_unreachable(self._suspect)

    async def aclose(self) -> None:
        self.fleet.watch_unreachable(None)
        tasks = [t for t in (self._watch, *self._restarting.values(), *self._suspects.values())
                 if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._watch = None
        if self._http is not None:
            await self._http.aclose()

    def metrics(self) -> dict[str, float]:
        out = {"infer/server_restarts": float(self.restarts),
               "infer/servers_lost": float(len(self.lost))}
        if self.restart_seconds:
            out["infer/server_restart_s"] = self.restart_seconds[-1]
            out["infer/server_restart_s_max"] = max(self.restart_seconds)
        return out

    async def update_weights(self, version: int, path: str | Path) -> None:
        """`FleetClient.update_weights` that remembers the weights for restarts and tolerates
        servers that died during the update (they are restarted with these weights). Restarted
        servers waiting for a broadcast take part and are back in service after it."""
        path = Path(path)
        directory = await asyncio.to_thread(weights_dir, path)
        if directory is None:  # a broadcast: every restart in progress takes part
            await asyncio.gather(*(asyncio.shield(t) for t in list(self._restarting.values())),
                                 return_exceptions=True)
        async with self._lock:
            self.target = (version, path)
            if directory is not None:
                self.dir_target = (version, directory)
            behind = sorted(self._behind)
            try:
                await self.fleet.update_weights(
                    version, path, rejoining=[self.servers.urls[i] for i in behind])
            except WeightUpdateError:
                if not await self._all_behind_died(version):
                    raise
            for i in behind:
                if i in self._behind and self.fleet.server(self.servers.urls[i]).version == version:
                    self._back_in_service(i, version)

    async def _all_behind_died(self, version: int) -> bool:
        """After a failed update: whether every server left behind has died (then they are
        restarted; a dying one gets `EXIT_GRACE_S` to be seen exited); False leaves the failure
        to the caller."""
        behind = [i for i, url in enumerate(self.servers.urls)
                  if (self.fleet.server(url).in_service or i in self._behind)
                  and self.fleet.server(url).version != version]
        if not behind:  # it failed only on servers already out of service (a hung one being
            return True  # restarted): they rejoin at this version (`_rejoin`)
        if not await self._exit_within_grace(behind):
            return False
        for i in behind:
            self._take_out(i, "died during a weight update")
        self._check_some_left()
        return True

    async def guard(self, work: Awaitable[T]) -> T:
        """Await `work`; cancel it and raise `NoServersLeft` once no server is left."""
        main = asyncio.ensure_future(work)
        lost = asyncio.ensure_future(self._none_left.wait())
        try:
            await asyncio.wait({main, lost}, return_when=asyncio.FIRST_COMPLETED)
            if main.done():
                return main.result()
            raise NoServersLeft(
                f"no inference server left: all {len(self.servers.specs)} died and could not "
                f"be restarted (see {self.servers.log_dir}/server-*.log)")
        finally:
            for task in (main, lost):
                task.cancel()
            await asyncio.gather(main, lost, return_exceptions=True)

    # ---- internals ----

    async def _watch_loop(self) -> None:
        while True:
            await asyncio.sleep(self.config.health_interval_s)
            idle = [i for i in range(len(self.servers.specs))
                    if i not in self.lost and i not in self._restarting]
            await asyncio.gather(*(self._check(i) for i in idle))

    async def _check(self, i: int) -> None:
        if self.servers.exited(i):
            self._take_out(i, f"exited with {self.servers.handles[i].proc.returncode}")
            return
        try:
            ok = (await self._http.get(f"{self.servers.urls[i]}/health")).status_code == 200
        except httpx.HTTPError:
            ok = False
        self._failures[i] = 0 if ok else self._failures[i] + 1
        if self._failures[i] >= HEALTH_FAILURES:
            self._take_out(i, f"/health failed {HEALTH_FAILURES} checks in a row")

    def _suspect(self, state: ServerState) -> None:
        """A request or /health round could not reach `state`: requests wait (it counts as
        restarting) while `_confirm` checks whether its process died, instead of failing until
        the next health round notices."""
        if state.url not in self.servers.urls:
            return
        i = self.servers.urls.index(state.url)
        if i in self._restarting or i in self.lost or i in self._suspects:
            return
        state.restarting = True
        self._suspects[i] = asyncio.create_task(self._confirm(i), name=f"suspect-server-{i}")

    async def _confirm(self, i: int) -> None:
        try:
            if await self._exit_within_grace([i]):
                self._take_out(i, f"exited with {self.servers.handles[i].proc.returncode}")
        finally:
            self._suspects.pop(i, None)
            if i not in self._restarting and i not in self.lost:
                self.fleet.server(self.servers.urls[i]).restarting = False

    async def _exit_within_grace(self, servers: list[int]) -> bool:
        """Whether every one of `servers` is seen exited within `EXIT_GRACE_S`."""
        deadline = time.monotonic() + EXIT_GRACE_S
        while not all(map(self.servers.exited, servers)):
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    def _take_out(self, i: int, why: str) -> None:
        """Server `i` is dead: out of service, then restarted or given up."""
        if i in self._restarting or i in self.lost:
            return
        url = self.servers.urls[i]
        state = self.fleet.server(url)
        state.in_service, state.restarting = False, self.config.restart_dead_servers
        self._failures[i] = 0
        self._behind.discard(i)
        if not self.config.restart_dead_servers:
            log.error("inference server %d (%s) %s; restarts are off: given up", i, url, why)
            self._give_up(i)
            return
        if self.new_group_epoch is not None:  # its ranks are gone from the trainer's group
            self.new_group_epoch()
        log.warning("inference server %d (%s) %s: restarting it", i, url, why)
        self._restarting[i] = asyncio.create_task(self._restart(i), name=f"restart-server-{i}")

    async def _restart(self, i: int) -> None:
        url = self.servers.urls[i]
        t0 = time.monotonic()
        try:
            handle = self.servers.handles[i]
            if handle is not None:
                await asyncio.to_thread(handle.stop, 5.0)
            version, path = self._restart_weights()
            self.servers.respawn(i, path, version)  # main thread: die_with_parent
            await self.servers.wait(i)
            await self._rejoin(i, version)
            if i not in self.lost:
                self.restart_seconds.append(time.monotonic() - t0)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - one restart's fault boundary: logged, counted
            log.error("inference server %d (%s) could not be restarted: %s: %s", i, url,
                      type(exc).__name__, str(exc)[-2000:])
            self._give_up(i)
        finally:
            self._restarting.pop(i, None)

    def _restart_weights(self) -> tuple[int, Path]:
        """(version, dir) a dead server restarts on: an embedded server on the newest weights
        directory; a vLLM server on the directory the fleet was launched on while it exists
        (same model path, same compile-cache key: no recompilation; the update path then
        brings the current weights), else on the newest directory."""
        if self.servers.kind == "vllm" and self.launch[1].is_dir():
            return self.launch
        return self.dir_target

    async def _rejoin(self, i: int, started_version: int) -> None:
        """Bring a restarted server to the current weights, then back into service; behind a
        broadcast-only version it waits out of service for the next broadcast."""
        url = self.servers.urls[i]
        async with self._lock:  # no update can slip between the catch-up and the rejoin
            version, path = self.target
            if version == started_version and not (self.servers.kind == "vllm" and version > 0):
                self._back_in_service(i, version)
                return
            directory = await asyncio.to_thread(weights_dir, path)
            if directory is None:
                self.fleet.server(url).version = started_version
                self._behind.add(i)
                log.info("inference server %d (%s) restarted on v%d: back in service after the "
                         "next broadcast", i, url, started_version)
                return
            await self.fleet.update_server(url, version, directory)
            self._back_in_service(i, version)

    def _back_in_service(self, i: int, version: int) -> None:
        url = self.servers.urls[i]
        state = self.fleet.server(url)
        state.version, state.down_until, state.in_service = version, 0.0, True
        state.restarting = False
        self._behind.discard(i)
        self.restarts += 1
        log.info("inference server %d (%s) restarted, serving policy v%d", i, url, version)

    def _give_up(self, i: int) -> None:
        self.lost.add(i)
        self._behind.discard(i)
        self.fleet.server(self.servers.urls[i]).restarting = False
        handle = self.servers.handles[i]
        if handle is not None:
            handle.kill()  # SIGKILL the group: nothing to wait for
        self._check_some_left()

    def _check_some_left(self) -> None:
        n = len(self.servers.specs)
        if len(self.lost) == n:
            self._none_left.set()
