"""Event-loop lag of the RL loop under many concurrent MoE-sized episodes: inline vs off-loop.

The real `RLLoop` runs `--episodes` concurrent scripted episodes (groups of `--group`); each
ends with a trajectory whose turns carry routed experts (router replay) as the servers return
them: base64 `.npy` [tokens, layers, top_k], about `--line-mb` MB per episodes.jsonl line. The
trainer is simulated (batch n -> policy v(n+1) after `--train-s`), as in `stragglers.py`. A
probe task sleeps 10 ms in a loop and records how late it wakes up (the lag any request,
heartbeat or timeout of the orchestrator sees).

Two variants, same workload:
  inline    the old path: each finished episode serialized, appended and fsynced on the loop;
            batches built (routing decoded), packed and written on the loop
  off_loop  the journal thread (ordered, fsynced, acknowledged before batching) and worker
            threads for batches

    .venv/bin/python benchmarks/event_loop.py [--episodes 256] [--line-mb 3] [--steps 3]

Last line: JSON with lag_p99_ms (off_loop), lag_max_ms, baseline_lag_p99_ms (inline),
lag_ratio (inline / off_loop), concurrent_episodes, line_mb, episodes_written, and the
machine's noise floor: idle_lag_p99_ms (the probe on an idle loop), load_avg_1m, cpus.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
from swefleet.orchestrator.config import OrchestratorConfig
from swefleet.orchestrator.loop import RLLoop

from swefleet import routed_experts
from swefleet.rundir import RunDir
from swefleet.stats import percentile
from swefleet.types import EpisodeStatus, Task, Trajectory, Turn

LAYERS, TOP_K, TURNS = 48, 8, 4
"""A Qwen3-30B-A3B-like MoE: 48 layers, top-8 of 128 experts."""


def turn_payloads(line_mb: float, seed: int = 0) -> list[tuple[list[int], list[int], str, int]]:
    """(prompt_ids, completion_ids, routed experts, start) per turn: rows trimmed as the agent
    loop stores them, so the turns' arrays add up to ~line_mb MB of base64."""
    rows_total = int(line_mb * 2**20 * 3 / 4 / (LAYERS * TOP_K))
    rng = np.random.default_rng(seed)
    per_turn, out, end = rows_total // TURNS, [], 0
    for i in range(TURNS):
        prompt, completion = per_turn - 40, 40
        start = 0 if i == 0 else end - 1
        end += per_turn  # the sample's length after this turn
        ids = rng.integers(0, 128, size=(end - 1 - start, LAYERS, TOP_K), dtype=np.uint8)
        out.append((list(range(prompt)), list(range(completion)), routed_experts.encode(ids),
                    start))
    return out


def scripted_rollout(payloads, state: dict, min_s: float, max_s: float):
    rng = random.Random(0)

    async def rollout(task, handle, group_id, sink):
        traj = Trajectory(episode_id=handle.episode_id, task_id=task.instance_id,
                          group_id=group_id)
        try:
            await asyncio.sleep(rng.uniform(min_s, max_s))  # model calls and commands
            version = state["loop"].state.served_version
            traj.turns = [Turn(prompt_ids=p, completion_ids=c, logprobs=[-1.0] * len(c),
                               policy_version=version, routed_experts=r,
                               routed_experts_start=start)
                          for p, c, r, start in payloads]
            traj.status = EpisodeStatus.unresolved
            traj.reward = float(rng.random() < 0.5)
        finally:
            sink(traj)
        return traj

    return rollout


async def trainer(run_dir: RunDir, steps: int, train_s: float) -> None:
    for step in range(steps):
        while not run_dir.batch_path(step).exists():
            await asyncio.sleep(0.05)
        await asyncio.sleep(train_s)
        run_dir.weights_path(step + 1).mkdir(exist_ok=True)


async def probe(lags: list[float], stop: asyncio.Event, period_s: float = 0.01) -> None:
    while not stop.is_set():
        t = time.perf_counter()
        await asyncio.sleep(period_s)
        lags.append((time.perf_counter() - t - period_s) * 1000.0)


async def one_variant(args, inline: bool, payloads) -> dict:
    with tempfile.TemporaryDirectory(prefix="swefleet-evloop-") as tmp:
        run_dir = RunDir(Path(tmp))
        groups = args.episodes // args.group
        cfg = OrchestratorConfig(steps=args.steps,
                                 groups_per_step=groups // (args.async_level + 1),
                                 rollouts_per_task=args.group,
                                 max_concurrent_episodes=args.episodes,
                                 async_level=args.async_level,
                                 max_off_policy_steps=100, straggler_grace=None)
        tasks = [Task(instance_id=f"t{i}", repo="x/x", problem_statement="p") for i in range(64)]

        async def update(version, path):
            await asyncio.sleep(0)

        state: dict = {}
        loop = RLLoop(cfg, scripted_rollout(payloads, state, args.min_s, args.max_s), tasks,
                      run_dir, update, inline_writes=inline)
        state["loop"] = loop
        lags: list[float] = []
        stop = asyncio.Event()
        prober = asyncio.create_task(probe(lags, stop))
        publisher = asyncio.create_task(trainer(run_dir, args.steps, args.train_s))
        t0 = time.monotonic()
        try:
            await loop.run()
        finally:
            stop.set()
            publisher.cancel()
            await prober
        lines = run_dir.episodes.read_bytes().count(b"\n")
        return {"lag_p50_ms": round(percentile(lags, 50), 2),
                "lag_p99_ms": round(percentile(lags, 99), 2),
                "lag_max_ms": round(max(lags), 2), "probes": len(lags),
                "episodes_written": lines, "wall_s": round(time.monotonic() - t0, 1),
                "line_mb": round(run_dir.episodes.stat().st_size / max(lines, 1) / 2**20, 2)}


async def noise_floor(seconds: float) -> float:
    """p99 lag of the probe on an idle loop: what the machine's scheduler alone costs."""
    lags: list[float] = []
    stop = asyncio.Event()
    prober = asyncio.create_task(probe(lags, stop))
    await asyncio.sleep(seconds)
    stop.set()
    await prober
    return round(percentile(lags, 99), 2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--episodes", type=int, default=256, help="concurrent episodes")
    ap.add_argument("--group", type=int, default=8, help="rollouts per task")
    ap.add_argument("--line-mb", type=float, default=2.5, help="episodes.jsonl line size")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--async-level", type=int, default=3,
                    help="(async_level + 1) x groups per step x group = episodes in flight")
    ap.add_argument("--train-s", type=float, default=0.5)
    ap.add_argument("--min-s", type=float, default=1.0, help="shortest scripted episode")
    ap.add_argument("--max-s", type=float, default=4.0, help="longest scripted episode")
    ap.add_argument("--floor-s", type=float, default=10.0,
                    help="seconds of the probe on an idle loop (the machine's noise floor)")
    ap.add_argument("--variant", choices=["both", "inline", "off_loop"], default="both")
    args = ap.parse_args()
    payloads = turn_payloads(args.line_mb)
    results = {}
    for name in (["inline", "off_loop"] if args.variant == "both" else [args.variant]):
        results[name] = asyncio.run(one_variant(args, name == "inline", payloads))
        print(name, json.dumps(results[name]), flush=True)
    floor = asyncio.run(noise_floor(args.floor_s))
    after = results.get("off_loop") or results["inline"]
    out = {"lag_p99_ms": after["lag_p99_ms"], "lag_max_ms": after["lag_max_ms"],
           "concurrent_episodes": args.episodes, "line_mb": after["line_mb"],
           "episodes_written": after["episodes_written"], "goal_lag_p99_ms": 50,
           "idle_lag_p99_ms": floor, "load_avg_1m": round(os.getloadavg()[0], 1),
           "cpus": os.cpu_count()}
    if "inline" in results and "off_loop" in results:
        base = results["inline"]["lag_p99_ms"]
        out.update(baseline_lag_p99_ms=base, baseline_lag_max_ms=results["inline"]["lag_max_ms"],
                   lag_ratio=round(base / max(after["lag_p99_ms"], 1e-3), 1))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
