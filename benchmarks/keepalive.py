"""Latency of one agent's turns over a kept-alive connection: swefleet's server socket (Nagle
off) next to the plain socket it used before (Nagle on), same app, same client, one run.

    python benchmarks/keepalive.py [--requests 200] [--prompt-len 512] [--gen-len 64]

Both servers run the model-free scripted app (`inference.scripted_server.create_app`, answers at
once) under uvicorn in their own process, on loopback; they differ only in the listening socket:

- `plain`: `socket.socket(AF_INET, SOCK_STREAM)` (proto 0), as a user would write it; asyncio
  then leaves Nagle on for accepted connections (it sets TCP_NODELAY only when the socket's
  proto is TCP), so an answer sent in two writes waits for the client's delayed ACK;
- `swefleet`: `inference.serving.bind_socket` (proto TCP + TCP_NODELAY).

The client is `FleetClient.generate`, one request in flight at a time (the turns of one agent
episode reuse one connection), after 5 warm-up requests. Reported: median and p90 latency per
request and the ratio plain / swefleet of the medians. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def serve_child(kind: str, port_file: str) -> None:
    """In the subprocess: the scripted app on the `kind` socket until killed."""
    import uvicorn
    from swefleet.inference.scripted_server import create_app
    from swefleet.inference.serving import bind_socket, write_atomic

    if kind == "swefleet":
        sock = bind_socket("127.0.0.1", 0)
    else:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
    app = create_app(vocab_size=32000)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False))
    write_atomic(port_file, str(sock.getsockname()[1]))
    server.run(sockets=[sock])


def start(kind: str, work: Path) -> tuple[subprocess.Popen, str]:
    port_file = work / f"{kind}.port"
    proc = subprocess.Popen([sys.executable, __file__, "--serve", kind, str(port_file)])
    deadline = time.monotonic() + 60
    while not port_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"keepalive: the {kind} server did not start")
        time.sleep(0.05)
    return proc, f"http://127.0.0.1:{port_file.read_text()}"


async def turns(url: str, a: argparse.Namespace) -> list[float]:
    """Seconds per request, one in flight at a time (after warm-up)."""
    from swefleet.inference.config import InferenceConfig
    from swefleet.inference.fleet import FleetClient

    prompt = [(i * 31) % 30000 + 10 for i in range(a.prompt_len)]
    out = []
    async with FleetClient([url], InferenceConfig(startup_timeout_s=60)) as fleet:
        for i in range(a.requests + 5):
            t0 = time.perf_counter()
            await fleet.generate(prompt, max_tokens=a.gen_len)
            if i >= 5:
                out.append(time.perf_counter() - t0)
    return out


def summary(seconds: list[float]) -> dict:
    ms = sorted(1e3 * s for s in seconds)
    return {"median_ms": statistics.median(ms), "p90_ms": ms[int(0.9 * (len(ms) - 1))],
            "mean_ms": statistics.fmean(ms)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--prompt-len", type=int, default=512)
    p.add_argument("--gen-len", type=int, default=64)
    p.add_argument("--serve", nargs=2, default=None, help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.serve:
        serve_child(*a.serve)
        return 0
    results = {}
    with tempfile.TemporaryDirectory(prefix="keepalive-") as d:
        for kind in ("plain", "swefleet"):
            proc, url = start(kind, Path(d))
            try:
                results[kind] = summary(asyncio.run(turns(url, a)))
            finally:
                proc.kill()
                proc.wait()
    print(f"{a.requests} sequential requests ({a.prompt_len} prompt + {a.gen_len} tokens) on one "
          "kept-alive connection")
    print(f"{'server socket':<16} {'median ms':>10} {'p90 ms':>8} {'mean ms':>8}")
    for kind, r in results.items():
        print(f"{kind:<16} {r['median_ms']:>10.2f} {r['p90_ms']:>8.2f} {r['mean_ms']:>8.2f}")
    ratio = results["plain"]["median_ms"] / results["swefleet"]["median_ms"]
    print(f"plain / swefleet median latency = {ratio:.1f}x")
    print(json.dumps({"plain": results["plain"], "swefleet": results["swefleet"],
                      "ratio_median": ratio, "requests": a.requests,
                      "prompt_len": a.prompt_len, "gen_len": a.gen_len}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
