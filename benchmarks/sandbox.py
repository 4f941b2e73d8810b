"""Sandbox layer costs: per-command overhead, warm vs cold acquire, many sessions at once.

    python benchmarks/sandbox.py [--commands 300] [--baseline-commands 40] [--acquires 5]
                                 [--concurrent 32] [--image swefleet-base:bookworm]

- exec: commands in the persistent session of a `DockerSandbox` (one socket write, one framed
  reply; no `docker exec`), p50/p99 of the round trip seen by the caller, back to back:
  `true` (the headline `exec_*` figures), `echo`, `cat` of a 1 MB file (its output is capped
  to head+tail by the session) and `cd /testbed` (a command that may change the shell's state,
  so its job dumps the state: the slow path);
- baseline: the same commands through mini-swe-agent's `DockerEnvironment` (`pip install
  mini-swe-agent`): one `docker exec -w /testbed <id> bash -lc CMD` per command. Without the
  package, the same CLI call is made (`baseline` in the JSON says which ran);
- acquire: `farm.acquire(task)` until the sandbox is usable, with the warm pool off (cold) and
  on (warm: the pool refilled between acquires);
- concurrent: `--concurrent` sessions acquired at once, each running 20 commands that check
  cwd/env persistence; errors are counted.

Every container is labelled with this run and removed at the end. The last line is one JSON
object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from swefleet.envs.config import FarmConfig, SandboxLimits
from swefleet.envs.farm import DockerFarm
from swefleet.envs.images import DEFAULT_BASE_IMAGE

from swefleet.stats import percentile
from swefleet.types import Task

LIMITS = SandboxLimits(memory_mb=256, pids_limit=128, cpus=1.0, lifetime_s=1800)


def _task(image: str) -> Task:
    return Task(instance_id="bench-1", repo="bench/bench", problem_statement="-", image=image)


#: name -> command; the 1 MB file is written by `SETUP` in both sandboxes.
COMMANDS = {
    "true": "true",
    "echo": "echo hello",
    "cat_1mb": "cat /tmp/bench-1mb.txt",
    "cd": "cd /testbed",
}
SETUP = "head -c 750000 /dev/urandom | base64 > /tmp/bench-1mb.txt"


async def bench_exec(farm: DockerFarm, task: Task, n: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {}
    async with farm.acquire(task) as sb:
        assert (await sb.run(SETUP)).exit_code == 0
        for name, command in COMMANDS.items():
            for _ in range(20):  # warm-up
                await sb.run(command)
            times[name] = []
            for _ in range(n if name == "true" else max(n // 3, 20)):
                t0 = time.perf_counter()
                r = await sb.run(command)
                times[name].append(time.perf_counter() - t0)
                assert r.exit_code == 0, r
    return times


class _DockerExecPerCommand:
    """mini-swe-agent's DockerEnvironment when importable, else the same CLI calls."""

    def __init__(self, image: str, run_id: str) -> None:
        run_args = ["--rm", "--network", "none", "--label", f"swefleet.run={run_id}"]
        os.environ.setdefault("MSWEA_SILENT_STARTUP", "1")
        try:
            import minisweagent
            from minisweagent.environments.docker import DockerEnvironment
        except ImportError:
            self.env, self.name = None, "docker exec CLI (mini-swe-agent not installed)"
            self.cid = subprocess.run(
                ["docker", "run", "-d", *run_args, image, "sleep", "900"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
        else:
            self.env = DockerEnvironment(image=image, cwd="/testbed", run_args=run_args)
            self.name = f"mini-swe-agent {minisweagent.__version__} DockerEnvironment"
            self.cid = self.env.container_id

    def execute(self, command: str) -> None:
        if self.env is not None:
            out = self.env.execute({"command": command})
            assert out["returncode"] == 0, out
            return
        argv = ["docker", "exec", "-w", "/testbed", self.cid, "bash", "-lc", command]
        subprocess.run(argv, capture_output=True, timeout=30, check=True)

    def cleanup(self) -> None:
        subprocess.run(["docker", "rm", "-f", self.cid], capture_output=True, check=False)
        if self.env is not None:
            self.env.container_id = None  # removed above; its own cleanup would `docker stop`


def bench_baseline(image: str, run_id: str, n: int) -> tuple[str, dict[str, list[float]]]:
    """The same commands, one `docker exec` each (mini-swe-agent's DockerEnvironment)."""
    env = _DockerExecPerCommand(image, run_id)
    try:
        env.execute(SETUP)
        times: dict[str, list[float]] = {}
        for name, command in COMMANDS.items():
            env.execute(command)
            times[name] = []
            for _ in range(n if name == "true" else max(n // 2, 10)):
                t0 = time.perf_counter()
                env.execute(command)
                times[name].append(time.perf_counter() - t0)
        return env.name, times
    finally:
        env.cleanup()


async def bench_acquire(run_id: str, task: Task, n: int, warm: bool) -> list[float]:
    cfg = FarmConfig(limits=LIMITS, warm_pool_size=1 if warm else 0, create_rate_per_s=50)
    key = (task.image, LIMITS, task.workdir)
    times = []
    async with DockerFarm(f"{run_id}-{'warm' if warm else 'cold'}", cfg) as farm:
        for _ in range(n + (1 if warm else 0)):
            while warm and farm.pool.idle(key) < 1 and times:
                await asyncio.sleep(0.05)
            t0 = time.perf_counter()
            async with farm.acquire(task) as sb:
                await sb.run("true")
                times.append(time.perf_counter() - t0)
    return times[1:] if warm else times  # the first warm acquire is necessarily cold


async def bench_concurrent(run_id: str, task: Task, n: int) -> tuple[int, float]:
    cfg = FarmConfig(limits=LIMITS, max_concurrent=n, create_rate_per_s=20)
    errors = 0

    async def session(i: int) -> None:
        nonlocal errors
        try:
            async with farm.acquire(task) as sb:
                await sb.run(f"mkdir -p /tmp/s{i} && cd /tmp/s{i} && export N={i}")
                for _ in range(20):
                    r = await sb.run('echo "$N $PWD"')
                    errors += r.output != f"{i} /tmp/s{i}\n"
        except Exception as e:  # noqa: BLE001 - counted, reported
            errors += 1
            print(f"session {i}: {type(e).__name__}: {e}", file=sys.stderr)

    t0 = time.perf_counter()
    async with DockerFarm(f"{run_id}-conc", cfg) as farm:
        await asyncio.gather(*(session(i) for i in range(n)))
    return errors, time.perf_counter() - t0


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--image", default=DEFAULT_BASE_IMAGE)
    ap.add_argument("--commands", type=int, default=300)
    ap.add_argument("--baseline-commands", type=int, default=40)
    ap.add_argument("--acquires", type=int, default=5)
    ap.add_argument("--concurrent", type=int, default=32)
    args = ap.parse_args()
    run_id, task = f"bench-sandbox-{uuid.uuid4().hex[:8]}", _task(args.image)

    load_at_start = os.getloadavg()[0]
    async with DockerFarm(run_id, FarmConfig(limits=LIMITS)) as farm:
        exec_t = await bench_exec(farm, task, args.commands)
    baseline, base_t = await asyncio.to_thread(
        bench_baseline, args.image, run_id, args.baseline_commands
    )
    cold_t = await bench_acquire(run_id, task, args.acquires, warm=False)
    warm_t = await bench_acquire(run_id, task, args.acquires, warm=True)
    errors, conc_s = await bench_concurrent(run_id, task, args.concurrent)

    p50, base50 = statistics.median(exec_t["true"]), statistics.median(base_t["true"])
    result = {
        "exec_p50_ms": round(p50 * 1e3, 3),
        "exec_p99_ms": round(percentile(exec_t["true"], 99) * 1e3, 3),
        "baseline_exec_p50_ms": round(base50 * 1e3, 3),
        "exec_speedup": round(base50 / p50, 1),
        "commands": {
            name: {
                "p50_ms": round(statistics.median(exec_t[name]) * 1e3, 3),
                "p99_ms": round(percentile(exec_t[name], 99) * 1e3, 3),
                "baseline_p50_ms": round(statistics.median(base_t[name]) * 1e3, 2),
                "speedup": round(
                    statistics.median(base_t[name]) / statistics.median(exec_t[name]), 1
                ),
            }
            for name in COMMANDS
        },
        "baseline": baseline,
        "acquire_warm_p50_ms": round(statistics.median(warm_t) * 1e3, 2),
        "acquire_cold_p50_ms": round(statistics.median(cold_t) * 1e3, 2),
        "concurrent_sessions": args.concurrent,
        "concurrent_errors": errors,
        "concurrent_wall_s": round(conc_s, 2),
        "load_avg_1m_start": round(load_at_start, 2),
        "load_avg_1m_end": round(os.getloadavg()[0], 2),  # (raised by the concurrent phase)
    }
    print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main())
