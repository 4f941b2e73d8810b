"""Per-server bookkeeping and the routing rule of the fleet client (no I/O here).

Rule: among servers whose known policy version satisfies the request, prefer live servers this
request has not tried yet, then any live one, then (all down) the one that comes back first.
Within that pool prefer servers under their in-flight limit (adaptive concurrency, see
`inference/concurrency.py`; no limit by default), then take the least outstanding requests; an episode sticks to its previous server
(prefix-cache reuse) while that server has at most `max_imbalance` more requests in flight than
the least loaded one.
"""

from __future__ import annotations

import math
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field

from swefleet.inference.idle import IdleClock

from swefleet.stats import percentile


@dataclass
class PrefixCacheStats:
    """A server's prefix-cache counters (tokens) at the last two scrapes of its `/metrics`."""

    queries: float = 0.0
    hits: float = 0.0
    window_queries: float = 0.0
    """Queried tokens between the last two scrapes."""
    window_hits: float = 0.0

    taken_queries: float = 0.0
    """Counter values at the last `take()` (the metrics sink's previous step)."""
    taken_hits: float = 0.0

    def update(self, queries: float, hits: float) -> None:
        dq, dh = queries - self.queries, hits - self.hits
        if dq < 0 or dh < 0:  # counters went back: the server restarted, count from zero
            dq, dh = queries, hits
            self.taken_queries = self.taken_hits = 0.0
        self.queries, self.hits, self.window_queries, self.window_hits = queries, hits, dq, dh

    def take(self) -> tuple[float, float]:
        """(queried, hit) tokens since the previous `take()`, as of the last scrape."""
        dq, dh = self.queries - self.taken_queries, self.hits - self.taken_hits
        self.taken_queries, self.taken_hits = self.queries, self.hits
        return dq, dh

    @property
    def window_rate(self) -> float | None:
        """Hit tokens / queried tokens between the last two scrapes (None: no queries)."""
        return self.window_hits / self.window_queries if self.window_queries > 0 else None

    @property
    def cumulative_rate(self) -> float | None:
        """Hit tokens / queried tokens since the server started."""
        return self.hits / self.queries if self.queries > 0 else None


@dataclass(eq=False)
class ServerState:
    """What the client knows about one server."""

    url: str
    role: str = "both"
    """`both` (unified server), `prefill` or `decode` (disaggregated pools)."""
    version: int | None = None
    """Last policy version the server reported (/health, a completion, update_weights)."""
    in_flight: int = 0
    limit: int = 1 << 30
    """Most requests in flight the client allows this server (adaptive concurrency)."""
    down_until: float = 0.0
    """Monotonic time before which the server is skipped (after a refused connection)."""
    attempts: int = 0
    completed: int = 0
    failures: int = 0
    """Attempts that ended in a retryable error (connection error, 502/503)."""
    tokens: int = 0
    drops: Counter = field(default_factory=Counter)
    latencies: deque = field(default_factory=lambda: deque(maxlen=4096))
    kv_usage: float | None = None
    """Last scraped `vllm:kv_cache_usage_perc` (None: not exposed or never scraped)."""
    prefix: PrefixCacheStats | None = None
    """Prefix-cache counters from `/metrics` (None: not exposed or never scraped)."""
    idle: IdleClock = field(default_factory=IdleClock)
    """Time with none of our requests in flight (`infer/idle_fraction`)."""
    in_service: bool = True
    """False while the server is restarted or after it was given up (`inference/supervisor.py`):
    no request is routed to it, no weight update sent."""
    restarting: bool = False
    """Being restarted: a request finding no server in service waits for it (in its deadline)."""

    def live(self, now: float) -> bool:
        return self.down_until <= now

    def has_room(self) -> bool:
        return self.in_flight < self.limit

    def snapshot(self, now: float) -> dict:
        lat = list(self.latencies)
        return {
            "role": self.role,
            "in_flight": self.in_flight,
            "inflight_limit": self.limit,
            "policy_version": self.version,
            "live": self.live(now),
            "attempts": self.attempts,
            "completed": self.completed,
            "failures": self.failures,
            "tokens": self.tokens,
            "latency_p50_s": percentile(lat, 50, empty=math.nan),
            "latency_p99_s": percentile(lat, 99, empty=math.nan),
            "drops": dict(self.drops),
            "kv_usage": self.kv_usage,
            "kv_hit_rate": self.prefix.window_rate if self.prefix else None,
            "kv_hit_rate_cumulative": self.prefix.cumulative_rate if self.prefix else None,
        }


class Router:
    """Least-outstanding-requests routing with episode affinity."""

    def __init__(
        self, servers: list[ServerState], max_imbalance: int, max_episodes: int = 100_000
    ) -> None:
        self.servers = servers
        self.max_imbalance = max_imbalance
        self.max_episodes = max_episodes
        self._affinity: OrderedDict[str, ServerState] = OrderedDict()
        self._turn = 0

    def eligible(self, min_version: int) -> list[ServerState]:
        servers = [s for s in self.servers if s.in_service]
        if min_version <= 0:
            return servers
        return [s for s in servers if s.version is not None and s.version >= min_version]

    def pick(
        self, episode_id: str, min_version: int, tried: set[str], now: float
    ) -> ServerState | None:
        """The server for the next attempt, or None when no server is new enough."""
        eligible = self.eligible(min_version)
        if not eligible:
            return None
        live = [s for s in eligible if s.live(now)]
        pool = [s for s in live if s.url not in tried] or live
        pool = [s for s in pool if s.has_room()] or pool
        if not pool:
            server = min(eligible, key=lambda s: s.down_until)
        else:
            server = self._least_loaded(pool, episode_id)
        if episode_id:
            self._affinity[episode_id] = server
            self._affinity.move_to_end(episode_id)
            if len(self._affinity) > self.max_episodes:
                self._affinity.popitem(last=False)
        return server

    def _least_loaded(self, pool: list[ServerState], episode_id: str) -> ServerState:
        least = min(s.in_flight for s in pool)
        sticky = self._affinity.get(episode_id) if episode_id else None
        if sticky in pool and sticky.in_flight <= least + self.max_imbalance:
            return sticky
        ties = [s for s in pool if s.in_flight == least]
        self._turn += 1
        return ties[self._turn % len(ties)]

    def forget(self, episode_id: str) -> None:
        self._affinity.pop(episode_id, None)
