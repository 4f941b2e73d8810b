"""Outliers benchmark: does one hung request or command stall a batch?

Same workload, one run, three ways:
  clean             async loop (async_level=1), no stragglers
  async_stragglers  async loop, 5 % of model requests hang (a real loopback server that never
                    answers them) and 5 % of commands hang (a real `sleep` that never ends)
  sync_stragglers   synchronous loop (async_level=0: every rollout of a batch is waited for),
                    same stragglers

Every episode is a few turns of: model request (deadline `--deadline-s`, then `model_timeout`)
then a shell command (deadline `--deadline-s`, then the process group is killed). The trainer is
simulated (the model is scripted, there are no weights): it turns batch n into policy v(n+1)
after `--train-s` seconds, through the same files and the same weight push as the real one.
Step time = interval between consecutive policy versions served (docs/bench.md), warm-up
steps excluded.

    .venv/bin/python benchmarks/stragglers.py [--steps 12] [--deadline-s 3] [--train-s 1]

Last line: one JSON object with clean_median_s, async_stragglers_median_s,
sync_stragglers_median_s, async_inflation, sync_inflation (and p95s).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from swefleet.inference.config import InferenceConfig
from swefleet.inference.fleet import FleetClient
from swefleet.inference.launch import start_server
from swefleet.inference.protocol import RequestCancelled
from swefleet.orchestrator.config import OrchestratorConfig
from swefleet.orchestrator.loop import RLLoop

from swefleet.rundir import RunDir, read_jsonl
from swefleet.stats import percentile
from swefleet.types import EpisodeStatus, Task, Trajectory, Turn

HANG_TOKEN = 1000


async def run_command(cmd: str, timeout_s: float) -> bool:
    """A real shell command in its own process group; killed (group) at the deadline."""
    proc = await asyncio.create_subprocess_shell(
        cmd, stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        start_new_session=True)
    try:
        await asyncio.wait_for(proc.wait(), timeout_s)
        return True
    except TimeoutError:
        os.killpg(proc.pid, signal.SIGKILL)
        await proc.wait()
        return False


def straggler_rollout(fleet: FleetClient, args, p_hang: float, rng: random.Random):
    async def rollout(task: Task, handle, group_id: str, sink) -> Trajectory:
        traj = Trajectory(episode_id=handle.episode_id, task_id=task.instance_id,
                          group_id=group_id)
        t0 = time.monotonic()
        try:
            for turn in range(args.turns):
                first = HANG_TOKEN if rng.random() < p_hang else 5
                prompt = [first, 7, 11, turn]
                c = await fleet.generate(prompt, max_tokens=8, episode_id=handle.episode_id)
                traj.turns.append(Turn(prompt_ids=prompt, completion_ids=c.completion_ids,
                                       logprobs=c.logprobs, policy_version=c.policy_version))
                cmd = "sleep 3600" if rng.random() < p_hang else f"sleep {args.command_s}"
                if not await run_command(cmd, args.deadline_s):
                    traj.status, traj.reason = EpisodeStatus.limit_time, "command timed out"
                    return traj
            traj.status, traj.reward = EpisodeStatus.unresolved, float(rng.random() < 0.5)
        except RequestCancelled as e:
            traj.status, traj.reason = EpisodeStatus.model_timeout, str(e)
        finally:
            traj.timings["total"] = time.monotonic() - t0
            sink(traj)
        return traj

    return rollout


async def simulated_trainer(run_dir: RunDir, steps: int, train_s: float) -> None:
    for step in range(steps):
        while not run_dir.batch_path(step).exists():
            await asyncio.sleep(0.02)
        await asyncio.sleep(train_s)
        tmp = run_dir.weights / f".v{step + 1:06d}.tmp"
        tmp.mkdir()
        tmp.rename(run_dir.weights_path(step + 1))


def cfg_grace(async_level: int) -> float | None:
    """The synchronous baseline waits for every rollout of its batch (no straggler cut)."""
    return 3.0 if async_level else None


async def run_mode(name: str, args, p_hang: float, async_level: int, root: Path) -> list[float]:
    server = start_server([sys.executable, "-m", "swefleet.inference.scripted_server", "--port", "0",
                           "--hang-token", str(HANG_TOKEN)], log_path=root / f"{name}.log")
    fleet = FleetClient([server.url], InferenceConfig(request_timeout_s=args.deadline_s, connect_timeout_s=1.0))
    run_dir = RunDir(root / name)
    cfg = OrchestratorConfig(
        steps=args.steps, groups_per_step=args.groups, rollouts_per_task=args.k,
        max_concurrent_episodes=args.concurrency, async_level=async_level,
        max_off_policy_steps=2, max_empty_batches=100,
        straggler_grace=cfg_grace(async_level))
    tasks = [Task(instance_id=f"t{i}", repo="bench/bench", problem_statement="x")
             for i in range(8)]
    rollout = straggler_rollout(fleet, args, p_hang, random.Random(args.seed))
    loop = RLLoop(cfg, rollout, tasks, run_dir, fleet.update_weights)
    trainer = asyncio.create_task(simulated_trainer(run_dir, args.steps, args.train_s))
    try:
        await loop.run()
    finally:
        trainer.cancel()
        await fleet.aclose()
        server.stop()
    served = [r["served_at_s"] for r in read_jsonl(run_dir.root / "weights.jsonl")]
    times = [b - a for a, b in zip([0.0] + served, served)]
    return times[args.warmup:]


def summary(times: list[float]) -> dict:
    return {"median_s": statistics.median(times), "p95_s": percentile(times, 95)}


async def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--warmup", type=int, default=2, help="leading steps excluded")
    p.add_argument("--groups", type=int, default=4, help="groups per step")
    p.add_argument("-k", type=int, default=4, help="rollouts per group")
    p.add_argument("--turns", type=int, default=2)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--p-hang", type=float, default=0.05)
    p.add_argument("--deadline-s", type=float, default=3.0)
    p.add_argument("--command-s", type=float, default=0.05)
    p.add_argument("--train-s", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="swefleet-stragglers-") as tmp:
        root = Path(tmp)
        clean = summary(await run_mode("clean", args, 0.0, 1, root))
        async_s = summary(await run_mode("async_stragglers", args, args.p_hang, 1, root))
        sync_s = summary(await run_mode("sync_stragglers", args, args.p_hang, 0, root))
    rows = [("clean (async)", clean), ("async + stragglers", async_s), ("sync + stragglers", sync_s)]
    print(f"{'loop':<22}{'median s':>10}{'p95 s':>10}{'x clean':>10}")
    for label, r in rows:
        print(f"{label:<22}{r['median_s']:>10.2f}{r['p95_s']:>10.2f}"
              f"{r['median_s'] / clean['median_s']:>10.2f}")
    print(json.dumps({
        "clean_median_s": clean["median_s"], "clean_p95_s": clean["p95_s"],
        "async_stragglers_median_s": async_s["median_s"], "async_stragglers_p95_s": async_s["p95_s"],
        "sync_stragglers_median_s": sync_s["median_s"], "sync_stragglers_p95_s": sync_s["p95_s"],
        "async_inflation": async_s["median_s"] / clean["median_s"],
        "sync_inflation": sync_s["median_s"] / clean["median_s"],
        "p_hang_request": args.p_hang, "p_hang_command": args.p_hang,
        "deadline_s": args.deadline_s, "train_s": args.train_s, "steps": args.steps,
        "rollouts_per_step": args.groups * args.k,
    }))


if __name__ == "__main__":
    asyncio.run(main())
