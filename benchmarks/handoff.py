"""Hand-off latency: a file renamed into place -> its waiter wakes, event-driven vs polling.

    python benchmarks/handoff.py [--rounds 30] [--poll-s 0.2]

The orchestrator and the trainer hand batches and weights over as files written to a temporary
name and renamed into place. Each round a writer thread sleeps a random 50-450 ms, writes a
64 KiB temp file, stamps the time and renames it; the waiter stamps the time it wakes.
Latency = return - rename (both `time.monotonic`). Waiters, interleaved round by round:

- poll: `while not path.exists(): sleep(poll_s)` (the hand-off before `swefleet.filewatch`);
- event: `FileWatch.wait` (inotify on the directory, blocking; the trainer's side);
- event async: `FileWatch.wait_async` (the inotify fd as an event-loop reader; the
  orchestrator's side).

Both event waiters run with a 60 s backstop, so each wake-up is the rename's event (counted).
The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from swefleet.filewatch import FileWatch

PAYLOAD = os.urandom(64 * 1024)


def _writer(path: Path, delay_s: float, stamps: dict) -> threading.Thread:
    def write() -> None:
        time.sleep(delay_s)
        tmp = path.with_name(f".tmp-{path.name}")
        tmp.write_bytes(PAYLOAD)
        stamps["renamed"] = time.monotonic()
        os.replace(tmp, path)

    t = threading.Thread(target=write)
    t.start()
    return t


def _poll(path: Path, poll_s: float, _watch: FileWatch) -> float:
    while not path.exists():
        time.sleep(poll_s)
    return time.monotonic()


def _event(path: Path, _poll_s: float, watch: FileWatch) -> float:
    assert watch.wait(path, timeout_s=30)
    return time.monotonic()


def _event_async(path: Path, _poll_s: float, watch: FileWatch) -> float:
    async def wait() -> float:
        assert await watch.wait_async(path, timeout_s=30)
        return time.monotonic()

    return asyncio.run(wait())


WAITERS = {"poll": _poll, "event": _event, "event async": _event_async}


def run(rounds: int, poll_s: float, seed: int = 0) -> dict:
    rng = random.Random(seed)
    lat: dict[str, list[float]] = {name: [] for name in WAITERS}
    by_event = 0
    with tempfile.TemporaryDirectory(prefix="handoff-") as d, FileWatch(backstop_s=60.0) as watch:
        for i in range(rounds):
            for name, wait in WAITERS.items():
                path, stamps = Path(d) / f"{name.replace(' ', '_')}_{i:06d}.npz", {}
                writer = _writer(path, rng.uniform(0.05, 0.45), stamps)
                woke = wait(path, poll_s, watch)
                lat[name].append(woke - stamps["renamed"])
                writer.join()
                by_event += name != "poll" and watch.found_by == "event"
    return {"lat": lat, "by_event": by_event}


def summary(lat: list[float]) -> dict:
    ms = sorted(x * 1e3 for x in lat)
    return {"median_ms": statistics.median(ms), "mean_ms": statistics.fmean(ms),
            "p90_ms": ms[int(0.9 * (len(ms) - 1))], "max_ms": ms[-1]}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--poll-s", type=float, default=0.2, help="the polling waiter's interval")
    a = p.parse_args()
    res = run(a.rounds, a.poll_s)
    stats = {name: summary(v) for name, v in res["lat"].items()}
    print(f"{a.rounds} rounds, writer delay 50-450 ms, poll interval {a.poll_s:g} s")
    print(f"{'waiter':<12} {'median ms':>10} {'mean ms':>10} {'p90 ms':>10} {'max ms':>10}")
    for name, s in stats.items():
        print(f"{name:<12} {s['median_ms']:>10.3f} {s['mean_ms']:>10.3f} {s['p90_ms']:>10.3f} "
              f"{s['max_ms']:>10.3f}")
    poll = stats["poll"]
    ratios = {f"{k}_{m}_ratio": poll[f"{m}_ms"] / max(stats[w][f"{m}_ms"], 1e-9)
              for k, w in (("poll_over_event", "event"), ("poll_over_async", "event async"))
              for m in ("median", "mean")}
    print("poll / event (median): {:.0f}x, poll / event async (median): {:.0f}x".format(
        ratios["poll_over_event_median_ratio"], ratios["poll_over_async_median_ratio"]))
    out = {"rounds": a.rounds, "poll_s": a.poll_s,
           **{f"{name.replace(' ', '_')}_{k}": v for name, s in stats.items() for k, v in s.items()},
           **ratios, "event_wakeups": res["by_event"], "event_waits": 2 * a.rounds}
    print(json.dumps(out))
    return 0 if res["by_event"] == 2 * a.rounds else 1


if __name__ == "__main__":
    sys.exit(main())
