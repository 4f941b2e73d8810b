"""The fleet's read-only side calls to its servers: `/health` (policy version, liveness),
`/v1/models` (`max_model_len`) and `/metrics` (KV usage and prefix-cache counters, which feed
the AIMD in-flight limits, `inference/concurrency.py`), the latter also as a background poll."""

from __future__ import annotations

import asyncio
import time

import orjson
from pydantic import ValidationError
from swefleet.inference.concurrency import kv_usage_of, parse_samples, prefix_cache_of
from swefleet.inference.config import InferenceConfig
from swefleet.inference.fleet_pool import ServerPool
from swefleet.inference.routing import PrefixCacheStats, ServerState
from swefleet.inference.transport import Transport
from swefleet.inference.wire import HealthResponse


class FleetAdmin:
    """Health refreshes, model-length queries and `/metrics` scrapes over the pool's servers."""

    def __init__(self, cfg: InferenceConfig, pool: ServerPool, transport: Transport) -> None:
        self.cfg = cfg
        self.pool = pool
        self.transport = transport
        self.versions_known = False
        self._refreshed_at = -1e9
        self._refresh_lock = asyncio.Lock()
        self._poller: asyncio.Task | None = None

    # ---- /health ----

    async def refresh(self, max_age_s: float = 0.5) -> dict[str, int | None]:
        """Ask every server's /health for its version; unreachable ones are marked down."""
        every = self.pool.every
        async with self._refresh_lock:
            if time.monotonic() - self._refreshed_at >= max_age_s:
                await asyncio.gather(*(self._health(s) for s in every))
                self._refreshed_at = time.monotonic()
                self.versions_known = True
        return {s.url: s.version for s in every}

    async def _health(self, server: ServerState) -> None:
        cooldown_s = self.cfg.server_cooldown_s
        try:
            resp = await self.transport.get(
                f"{server.url}/health", timeout_s=self.cfg.connect_timeout_s
            )
        except (ConnectionError, TimeoutError):
            server.down_until = time.monotonic() + cooldown_s
            self.pool.unreachable(server)
            return
        healthy = resp.status_code == 200
        if healthy and resp.content:  # vLLM answers an empty 200: keep the version we set
            try:
                server.version = HealthResponse.model_validate_json(resp.content).policy_version
            except ValidationError:  # not an answer we can read: treated as down
                healthy = False
        elif healthy and server.version is None:
            server.version = 0
        server.down_until = 0.0 if healthy else time.monotonic() + cooldown_s

    # ---- /v1/models ----

    async def max_model_len(self) -> int | None:
        """The smallest `max_model_len` the servers announce on `/v1/models`; None when no
        server answers one."""
        found = [n for n in await asyncio.gather(*map(self._model_len, self.pool.every)) if n]
        return min(found, default=None)

    async def _model_len(self, server: ServerState) -> int | None:
        try:
            resp = await self.transport.get(
                f"{server.url}/v1/models", timeout_s=self.cfg.connect_timeout_s
            )
            cards = orjson.loads(resp.content).get("data") if resp.status_code == 200 else None
        except (ConnectionError, TimeoutError, orjson.JSONDecodeError, AttributeError):
            return None
        lens = [c.get("max_model_len") for c in cards or [] if isinstance(c, dict)]
        return min((n for n in lens if isinstance(n, int) and n > 0), default=None)

    # ---- /metrics ----

    def start_polling(self) -> None:
        """Start the background `/metrics` poll once (a running loop is needed)."""
        if self._poller is None:
            self._poller = asyncio.create_task(self._poll_metrics(), name="fleet-metrics-poll")

    async def stop_polling(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            await asyncio.gather(self._poller, return_exceptions=True)
            self._poller = None

    async def scrape_metrics(self) -> None:
        """Read every server's `/metrics` once (KV usage, prefix-cache counters, AIMD limits)."""
        await asyncio.gather(*(self._scrape_one(s) for s in self.pool.every))
        self.pool.room.set()

    async def _poll_metrics(self) -> None:
        """Scrape every server's `/metrics` every `poll_interval_s`, forever."""
        interval = self.cfg.concurrency.poll_interval_s
        while True:
            await self.scrape_metrics()
            await asyncio.sleep(interval)

    async def _scrape_one(self, server: ServerState) -> None:
        try:
            resp = await self.transport.get(
                f"{server.url}/metrics", timeout_s=self.cfg.connect_timeout_s
            )
        except (ConnectionError, TimeoutError):
            return  # down or slow: keep the limit; the request path handles liveness
        if resp.status_code != 200:
            return
        samples = parse_samples(resp.text)
        server.kv_usage = kv_usage_of(samples)
        counters = prefix_cache_of(samples)
        if counters is not None:
            server.prefix = server.prefix or PrefixCacheStats()
            server.prefix.update(*counters)
        self.pool.observe(server)
        self.pool.totals["metrics_polls"] += 1
