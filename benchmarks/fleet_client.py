"""Client overhead of `FleetClient.generate` next to a plain httpx loop, at high concurrency.

    python benchmarks/fleet_client.py [--requests 1024] [--concurrency 256] [--repeats 3]

Every client sends the same `/v1/completions` body to the same loopback scripted server
(`inference.scripted_server`, answers at once, runs in its own process) with `concurrency`
requests in flight. Overhead per request = CPU time of this (client) process / requests, so the
server's own cost is excluded; wall time per request is reported too. The clients run
`repeats` times each, alternating, and the lowest value is kept:

- baseline: one plain `httpx.AsyncClient` (post, parse JSON) -- what the issue compares with;
- pooled httpx: the same over 16 clients (httpcore's pool costs CPU linear in its size per
  request, so smaller pools are several times cheaper at 256 in flight; the layout the fleet
  client used before it moved to aiohttp);
- plain aiohttp: one `aiohttp.ClientSession` (post, orjson parse): the floor of the transport
  the fleet client uses;
- fleet: `FleetClient.generate` (routing, deadline, tenacity, response validation);
- with `--streamed`, also fleet streamed: the same with `first_token_timeout_s` set, so every
  request is streamed (one SSE chunk per token from the scripted server) and assembled
  (`streamed_overhead_ms_per_request`).

`fleet_logic_ms_per_request` = fleet - plain aiohttp. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import aiohttp
import httpx
import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from swefleet.inference.config import InferenceConfig
from swefleet.inference.fleet import FleetClient
from swefleet.inference.fleet_request import request_body
from swefleet.inference.launch import start_scripted_server

PROMPT = list(range(100, 612))  # 512 prompt tokens
MAX_TOKENS = 16
RESETS = {"httpx": 0}


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
    """Plain httpx: post the body, parse the JSON. `shards` > 1 rotates over that many clients."""
    cfg = InferenceConfig()
    body = request_body(cfg, PROMPT, MAX_TOKENS)
    per = -(-cfg.max_connections // shards)
    limits = httpx.Limits(max_connections=per, max_keepalive_connections=per)
    clients = [httpx.AsyncClient(limits=limits, trust_env=False, timeout=60) for _ in range(shards)]

    async def one(i: int) -> None:
        for attempt in range(3):  # a keep-alive connection the server closed meanwhile
            try:
                resp = await clients[i % shards].post(f"{url}/v1/completions", json=body)
                break
            except (httpx.ReadError, httpx.RemoteProtocolError):
                if attempt == 2:
                    raise
                RESETS["httpx"] += 1
        resp.raise_for_status()
        choice = json.loads(resp.content)["choices"][0]
        assert len(choice["token_ids"]) == MAX_TOKENS

    try:
        await _drive(concurrency, concurrency, one)  # warm the connection pools
        return await _drive(n, concurrency, one)
    finally:
        await asyncio.gather(*(c.aclose() for c in clients))


async def run_aiohttp(url: str, n: int, concurrency: int) -> tuple[float, float]:
    """Plain aiohttp: post the orjson body, parse the JSON."""
    data = orjson.dumps(request_body(InferenceConfig(), PROMPT, MAX_TOKENS))
    headers = {"Content-Type": "application/json"}
    connector = aiohttp.TCPConnector(limit=InferenceConfig().max_connections)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one(i: int) -> None:
            async with session.post(f"{url}/v1/completions", data=data, headers=headers) as r:
                assert r.status == 200
                choice = orjson.loads(await r.read())["choices"][0]
            assert len(choice["token_ids"]) == MAX_TOKENS

        await _drive(concurrency, concurrency, one)
        return await _drive(n, concurrency, one)


async def run_fleet(
    url: str, n: int, concurrency: int, first_token_timeout_s: float | None = None
) -> tuple[float, float]:
    cfg = InferenceConfig(request_timeout_s=60, first_token_timeout_s=first_token_timeout_s)
    async with FleetClient([url], cfg) as fleet:

        async def one(i: int) -> None:
            c = await fleet.generate(PROMPT, max_tokens=MAX_TOKENS, episode_id=f"ep{i % 512}")
            assert len(c.completion_ids) == MAX_TOKENS

        await _drive(concurrency, concurrency, one)
        return await _drive(n, concurrency, one)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--requests", type=int, default=1024)
    p.add_argument("--concurrency", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--pool-shards", type=int, default=16, help="clients of the pooled httpx run")
    p.add_argument("--streamed", action="store_true", help="also time streamed fleet requests")
    args = p.parse_args()
    n, conc = args.requests, args.concurrency
    runs: dict[str, list[tuple[float, float]]] = {
        "plain": [],
        "pooled": [],
        "aiohttp": [],
        "fleet": [],
    }
    if args.streamed:
        runs["streamed"] = []
    with start_scripted_server() as server:
        for r in range(args.repeats):
            runs["plain"].append(asyncio.run(run_plain(server.url, n, conc)))
            runs["pooled"].append(asyncio.run(run_plain(server.url, n, conc, args.pool_shards)))
            runs["aiohttp"].append(asyncio.run(run_aiohttp(server.url, n, conc)))
            runs["fleet"].append(asyncio.run(run_fleet(server.url, n, conc)))
            if args.streamed:
                runs["streamed"].append(asyncio.run(run_fleet(server.url, n, conc, 60.0)))
            cpu = " ".join(f"{k} {v[-1][0]:.2f}" for k, v in runs.items())
            wall = " ".join(f"{k} {v[-1][1]:.2f}" for k, v in runs.items())
            print(f"repeat {r}: cpu s {cpu} | wall s {wall}", flush=True)
    ms = 1000.0 / n
    cpu = {k: round(min(c for c, _ in v) * ms, 4) for k, v in runs.items()}
    wall = {k: round(min(w for _, w in v) * ms, 4) for k, v in runs.items()}
    print(
        f"client CPU ms/request: httpx {cpu['plain']:.3f}, httpx x{args.pool_shards} pools "
        f"{cpu['pooled']:.3f}, aiohttp {cpu['aiohttp']:.3f}, FleetClient {cpu['fleet']:.3f} | "
        f"FleetClient / httpx = {cpu['fleet'] / cpu['plain']:.3f}, httpx / FleetClient = "
        f"{cpu['plain'] / cpu['fleet']:.1f}x, FleetClient / aiohttp = "
        f"{cpu['fleet'] / cpu['aiohttp']:.2f}",
        flush=True,
    )
    result = {
        "overhead_ms_per_request": cpu["fleet"],
        "baseline_overhead_ms_per_request": cpu["plain"],
        "wall_ms_per_request": wall["fleet"],
        "baseline_wall_ms_per_request": wall["plain"],
        "pooled_httpx_overhead_ms_per_request": cpu["pooled"],
        "aiohttp_overhead_ms_per_request": cpu["aiohttp"],
        "fleet_logic_ms_per_request": round(cpu["fleet"] - cpu["aiohttp"], 4),
        "ratio_to_baseline": round(cpu["fleet"] / cpu["plain"], 4),
        "pool_shards": args.pool_shards,
        "concurrency": conc,
        "requests": n,
        "prompt_tokens": len(PROMPT),
        "max_tokens": MAX_TOKENS,
        "target_ms_per_request": 1.0,
        "httpx_connection_resets_retried": RESETS["httpx"],
    }
    if args.streamed:
        result["streamed_overhead_ms_per_request"] = cpu["streamed"]
        result["streamed_wall_ms_per_request"] = wall["streamed"]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
