"""The fleet client's servers: the decode and prefill pools with their routers and in-flight
limiters, the fleet's counters, and picking the server of one attempt (the rule itself:
`inference/routing.py`)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence

from swefleet.inference.concurrency import AIMDController
from swefleet.inference.config import InferenceConfig
from swefleet.inference.fleet_request import Call
from swefleet.inference.protocol import CancelReason, RequestCancelled
from swefleet.inference.routing import Router, ServerState


class ServerPool:
    """Server states, routers, AIMD limiters and the `totals` counters of one fleet client."""

    def __init__(
        self, urls: Sequence[str], prefill_urls: Sequence[str], cfg: InferenceConfig
    ) -> None:
        role = "decode" if prefill_urls else "both"
        self.servers = [ServerState(url.rstrip("/"), role=role) for url in urls]
        self.prefill_servers = [ServerState(u.rstrip("/"), role="prefill") for u in prefill_urls]
        self.every = self.prefill_servers + self.servers
        self.router = Router(self.servers, cfg.affinity_max_imbalance)
        self.prefill_router = Router(self.prefill_servers, cfg.affinity_max_imbalance)
        self.totals: Counter = Counter()
        self.limiters: dict[str, AIMDController] = {}
        if cfg.concurrency.enabled:
            for server in self.every:
                self.limiters[server.url] = limiter = AIMDController(cfg.concurrency)
                server.limit = limiter.cap
        self.room = asyncio.Event()
        """Set when a server may have room again (an attempt ended, limits were re-read)."""
        self.on_unreachable: Callable[[ServerState], None] | None = None
        """Told of a server that refused or lost a connection (`FleetClient.watch_unreachable`:
        a supervisor checks at once whether its process died)."""

    def unreachable(self, server: ServerState) -> None:
        """`server` refused or lost a connection: marked down by the caller; the listener told."""
        if self.on_unreachable is not None:
            self.on_unreachable(server)

    def server(self, url: str) -> ServerState:
        """The state of the server at `url` (KeyError if not in the fleet)."""
        return next(s for s in self.every if s.url == url.rstrip("/"))

    def in_service(self) -> list[ServerState]:
        return [s for s in self.every if s.in_service]

    def forget(self, episode_id: str) -> None:
        """Forget an episode's server affinity in both pools."""
        self.router.forget(episode_id)
        self.prefill_router.forget(episode_id)

    # ---- one attempt on a server ----

    def begin(self, call: Call, server: ServerState) -> None:
        call.tried.add(server.url)
        server.attempts += 1
        server.in_flight += 1
        server.idle.started()

    def end(self, server: ServerState) -> None:
        server.in_flight -= 1
        server.idle.finished()
        if self.limiters:
            self.room.set()

    def overloaded(self, server: ServerState) -> None:
        """The server answered 503: its AIMD limiter (if any) backs off."""
        limiter = self.limiters.get(server.url)
        if limiter is not None:
            limiter.overloaded(time.monotonic())
            server.limit = limiter.cap

    def observe(self, server: ServerState) -> None:
        """A fresh KV usage of `server` was scraped: its AIMD limiter (if any) adapts."""
        limiter = self.limiters.get(server.url)
        if limiter is not None:
            limiter.observe(server.kv_usage, server.in_flight, time.monotonic())
            server.limit = limiter.cap

    # ---- routing ----

    async def route(
        self, call: Call, router: Router, refresh: Callable[[], Awaitable[object]]
    ) -> ServerState:
        """The server of `call`'s next attempt in `router`'s pool; `refresh` (the fleet's
        /health round) runs once when no server qualifies."""
        if self.limiters:
            await self._wait_for_room(call, router)
        now = time.monotonic()
        server = router.pick(call.episode_id, call.min_version, call.tried, now)
        if server is None:
            await refresh()
            server = router.pick(call.episode_id, call.min_version, call.tried, now)
        while server is None and any(s.restarting for s in router.servers):
            await asyncio.sleep(0.2)  # none in service, one coming back: wait (within deadline)
            server = router.pick(call.episode_id, call.min_version, call.tried, time.monotonic())
        if server is None:
            versions = {s.url: s.version for s in router.servers}
            raise RequestCancelled(
                CancelReason.stale, f"no server at policy version >= {call.min_version}: {versions}"
            )
        return server

    async def _wait_for_room(self, call: Call, router: Router) -> None:
        """Wait while every live eligible server of the pool is at its in-flight limit."""
        while True:
            now = time.monotonic()
            live = [s for s in router.eligible(call.min_version) if s.live(now)]
            if not live or any(s.has_room() for s in live):
                return
            if not call.waited:
                call.waited = True
                self.totals["concurrency_waits"] += 1
            self.room.clear()
            try:  # re-check now and then: servers may come back or change version meanwhile
                async with asyncio.timeout(0.5):
                    await self.room.wait()
            except TimeoutError:
                pass
