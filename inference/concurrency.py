"""Adaptive in-flight limit per server from its KV-cache usage (AIMD). No I/O here.

A server's KV cache is the resource that decides whether another request helps: below it,
more requests in flight mean larger decode batches; above it, vLLM preempts (recomputes) or
queues, and every request gets slower. The fleet client polls each server's Prometheus
`/metrics` (vLLM 0.26: gauge `vllm:kv_cache_usage_perc`, 1.0 = full; older vLLM named it
`vllm:gpu_cache_usage_perc`) and keeps one limit per server (the same scrape also reads the
prefix-cache counters, `prefix_cache_of`, for the KV hit rate in the metrics):

- additive increase: `+increase` per poll while usage < `grow_below` and the limit binds
  (in flight >= `binding_fraction` x limit; growing a limit nobody reaches proves nothing);
- multiplicative decrease: x`decrease_factor` when usage > `cut_above`, or on an HTTP 503,
  at most once per `cooldown_s` (the gauge lags: requests admitted before a cut still hold
  their blocks, so cutting on every poll would collapse the limit to its floor);
- bounds [min_inflight, max_inflight]; a server that does not expose the gauge gets
  `max_inflight` (no adaptation).

Same shape as prime-rl's controller (research/async_rl_anchors.md §1.6), reduced to per-server
AIMD on KV usage and overload answers.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from swefleet.inference.config import ConcurrencyConfig

KV_USAGE_METRICS = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
#: vLLM 0.26 `vllm/v1/metrics/loggers.py` counters (tokens), exposed by prometheus_client with
#: the `_total` suffix; the bare names are accepted too
PREFIX_CACHE_QUERIES = ("vllm:prefix_cache_queries_total", "vllm:prefix_cache_queries")
PREFIX_CACHE_HITS = ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits")
_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def parse_samples(text: str) -> dict[str, list[float]]:
    """Finite sample values of a Prometheus text exposition by metric name (all label sets)."""
    out: dict[str, list[float]] = {}
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        if math.isfinite(value):
            out.setdefault(m.group(1), []).append(value)
    return out


def kv_usage_of(samples: dict[str, list[float]]) -> float | None:
    """Highest KV-cache usage (0..1) over the label sets of the first gauge name present (a
    data-parallel server reports one per engine; the fullest one limits admission)."""
    for name in KV_USAGE_METRICS:
        if samples.get(name):
            return max(samples[name])
    return None


def _counter(samples: dict[str, list[float]], names: tuple[str, ...]) -> float | None:
    for name in names:
        if name in samples:
            return sum(samples[name])  # one sample per engine under data parallel
    return None


def prefix_cache_of(samples: dict[str, list[float]]) -> tuple[float, float] | None:
    """(queried tokens, hit tokens) of the prefix cache summed over engines, None if absent."""
    queries = _counter(samples, PREFIX_CACHE_QUERIES)
    hits = _counter(samples, PREFIX_CACHE_HITS)
    if queries is None or hits is None:
        return None
    return queries, hits


def parse_kv_usage(text: str) -> float | None:
    """`kv_usage_of` of a `/metrics` text."""
    return kv_usage_of(parse_samples(text))


@dataclass
class AIMDController:
    """The in-flight limit of one server."""

    cfg: ConcurrencyConfig
    limit: float = 0.0
    last_cut: float = -math.inf
    usage: float | None = None
    adaptive: bool = True
    """False once the server answered /metrics without the gauge (limit = max_inflight)."""
    increases: int = 0
    cuts: int = 0

    def __post_init__(self) -> None:
        if not self.limit:
            self.limit = float(self.cfg.initial_inflight)

    @property
    def cap(self) -> int:
        """Requests this server may have in flight now."""
        return max(self.cfg.min_inflight, int(self.limit))

    def observe(self, usage: float | None, in_flight: int, now: float) -> float:
        """One poll: `usage` of the KV cache (None: gauge absent) with `in_flight` requests."""
        self.usage = usage
        if usage is None:
            self.adaptive = False
            self.limit = float(self.cfg.max_inflight)
            return self.limit
        if not self.adaptive:  # the gauge appeared (server restarted with metrics on)
            self.adaptive = True
            self.limit = float(self.cfg.initial_inflight)
        if usage > self.cfg.cut_above:
            self._cut(now)
        elif usage < self.cfg.grow_below and in_flight >= self.cfg.binding_fraction * self.limit:
            self.limit = min(float(self.cfg.max_inflight), self.limit + self.cfg.increase)
            self.increases += 1
        return self.limit

    def overloaded(self, now: float) -> float:
        """The server answered 503 (queue full): cut like on a full KV cache."""
        if self.adaptive:
            self._cut(now)
        return self.limit

    def _cut(self, now: float) -> None:
        if now - self.last_cut < self.cfg.cooldown_s:
            return
        self.limit = max(float(self.cfg.min_inflight), self.limit * self.cfg.decrease_factor)
        self.last_cut = now
        self.cuts += 1
