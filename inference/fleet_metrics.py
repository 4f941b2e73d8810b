"""The fleet's observability summary: fleet-wide `infer/...` scalars for the metrics sink and
per-server snapshots, from the pool's counters and the last `/metrics` scrapes."""

from __future__ import annotations

import math
import time

from swefleet.inference.fleet_pool import ServerPool

from swefleet.stats import percentile


def server_metrics(pool: ServerPool) -> dict[str, dict]:
    """See `FleetClient.server_metrics`."""
    now = time.monotonic()
    return {s.url: s.snapshot(now) for s in pool.every}


def fleet_metrics(pool: ServerPool) -> dict[str, float]:
    """See `FleetClient.metrics`; takes the idle clocks' and prefix-cache counters' windows."""
    now = time.monotonic()
    every = pool.every
    latencies = [x for s in pool.servers for x in s.latencies]
    out = {f"infer/{key}": float(n) for key, n in pool.totals.items()}
    out["infer/in_flight"] = float(sum(s.in_flight for s in every))
    out["infer/live_servers"] = float(sum(s.live(now) and s.in_service for s in every))
    if pool.limiters:
        out["infer/inflight_limit"] = float(sum(s.limit for s in pool.servers))
    out["infer/latency_p50_s"] = percentile(latencies, 50, empty=math.nan)
    out["infer/latency_p99_s"] = percentile(latencies, 99, empty=math.nan)
    # mean over servers of the time none of our requests was in flight since the last call
    out["infer/idle_fraction"] = sum(s.idle.take() for s in every) / max(len(every), 1)
    taken = [s.prefix.take() for s in every if s.prefix is not None]
    queries = sum(q for q, _ in taken)
    if queries > 0:  # prompt tokens served from the prefix cache since the previous call
        out["infer/kv_hit_rate"] = sum(h for _, h in taken) / queries
        out["infer/prompt_tokens"] = queries
    return out
