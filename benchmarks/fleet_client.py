"""Client overhead of `FleetClient.generate` next to a plain httpx loop, at high concurrency.

    python benchmarks/fleet_client.py [--requests 2048] [--concurrency 256] [--repeats 3]

Both clients send the same `/v1/completions` body to the same loopback scripted server
(`inference.scripted_server`, answers at once, runs in its own process) with `concurrency`
requests in flight. Overhead per request = CPU time of this (client) process / requests, so the
server's own cost is excluded; wall time per request is reported too. Three clients run
`repeats` times each, alternating, and the lowest value is kept:

- baseline: one plain `httpx.AsyncClient` (post, parse JSON);
- pooled baseline: the same over `http_pool_shards` clients, the fleet client's pool layout
  (httpcore's pool costs CPU linear in its size per request, so this alone is several times
  cheaper at 256 in flight);
- fleet: `FleetClient.generate` (routing, deadline, tenacity, response validation).

`fleet_logic_ms_per_request` = fleet - pooled baseline. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from inference.config import InferenceConfig
from inference.fleet import FleetClient, request_body
from inference.launch import start_scripted_server

PROMPT = list(range(100, 612))  # 512 prompt tokens
MAX_TOKENS = 16


async def _drive(n: int, concurrency: int, one) -> tuple[float, float]:
    """Run `n` calls of `one(i)` with `concurrency` in flight; (cpu_s, wall_s)."""
    sem = asyncio.Semaphore(concurrency)

    async def guarded(i: int) -> None:
        async with sem:
            await one(i)

    cpu0, wall0 = time.process_time(), time.perf_counter()
    await asyncio.gather(*(guarded(i) for i in range(n)))
    return time.process_time() - cpu0, time.perf_counter() - wall0


async def run_plain(url: str, n: int, concurrency: int, shards: int = 1) -> tuple[float, float]:
    """Plain httpx: post the body, parse the JSON. `shards` > 1 rotates over that many clients
    (the fleet client's pool layout) to isolate the cost of the fleet logic itself."""
    cfg = InferenceConfig()
    body = request_body(cfg, PROMPT, MAX_TOKENS)
    per = -(-cfg.max_connections // shards)
    limits = httpx.Limits(max_connections=per, max_keepalive_connections=per)
    clients = [httpx.AsyncClient(limits=limits, trust_env=False, timeout=60) for _ in range(shards)]

    async def one(i: int) -> None:
        resp = await clients[i % shards].post(f"{url}/v1/completions", json=body)
        resp.raise_for_status()
        choice = json.loads(resp.content)["choices"][0]
        assert len(choice["token_ids"]) == MAX_TOKENS

    try:
        await _drive(concurrency, concurrency, one)  # warm the connection pools
        return await _drive(n, concurrency, one)
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))


async def run_fleet(url: str, n: int, concurrency: int) -> tuple[float, float]:
    async with FleetClient([url], InferenceConfig(request_timeout_s=60)) as fleet:

        async def one(i: int) -> None:
            c = await fleet.generate(PROMPT, max_tokens=MAX_TOKENS, episode_id=f"ep{i % 512}")
            assert len(c.completion_ids) == MAX_TOKENS

        await _drive(concurrency, concurrency, one)
        return await _drive(n, concurrency, one)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--requests", type=int, default=2048)
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    n, conc = args.requests, args.concurrency
    plain, pooled, fleet = [], [], []
    shards = InferenceConfig().http_pool_shards
    with start_scripted_server() as server:
        for r in range(args.repeats):
            plain.append(asyncio.run(run_plain(server.url, n, conc)))
            pooled.append(asyncio.run(run_plain(server.url, n, conc, shards)))
            fleet.append(asyncio.run(run_fleet(server.url, n, conc)))
            print(
                f"repeat {r}: cpu s plain {plain[-1][0]:.2f} pooled {pooled[-1][0]:.2f} "
                f"fleet {fleet[-1][0]:.2f} | wall s plain {plain[-1][1]:.2f} "
                f"pooled {pooled[-1][1]:.2f} fleet {fleet[-1][1]:.2f}",
                flush=True,
            )
    ms = 1000.0 / n
    result = {
        "overhead_ms_per_request": round(min(c for c, _ in fleet) * ms, 4),
        "baseline_overhead_ms_per_request": round(min(c for c, _ in plain) * ms, 4),
        "wall_ms_per_request": round(min(w for _, w in fleet) * ms, 4),
        "baseline_wall_ms_per_request": round(min(w for _, w in plain) * ms, 4),
        "pooled_baseline_overhead_ms_per_request": round(min(c for c, _ in pooled) * ms, 4),
        "http_pool_shards": shards,
        "concurrency": conc,
        "requests": n,
        "prompt_tokens": len(PROMPT),
        "max_tokens": MAX_TOKENS,
    }
    result["fleet_logic_ms_per_request"] = round(
        result["overhead_ms_per_request"] - result["pooled_baseline_overhead_ms_per_request"], 4
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
