"""Print one `swefleet rl` run's learning curve and step-time split from its run directory.

    python benchmarks/rl_curve.py runs/gpu-vllm-...      # table, then one JSON object last

Per step: mean reward, mismatch KL (trainer logprobs vs the servers'), step time, weight-sync
time. The JSON holds the reward of the first and last 5 steps, the median steady step time
(steps after the first 2) and the run's drops, so "reward rising" is one number pair.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path


def _records(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def curve(run: Path) -> dict:
    steps = _records(run / "metrics.jsonl")
    if not steps:
        raise SystemExit(f"{run}: no metrics.jsonl records")
    print(f"{'step':>4} {'reward':>7} {'mismatch_kl':>11} {'step_s':>7} {'sync_s':>7}")
    for r in steps:
        print(f"{r.get('step', -1):>4} {r.get('rollout/reward_mean', float('nan')):>7.3f} "
              f"{r.get('trainer/mismatch_kl', float('nan')):>11.4f} "
              f"{r.get('time/step_s', float('nan')):>7.2f} "
              f"{r.get('time/weight_sync_s', float('nan')):>7.2f}")
    rewards = [r["rollout/reward_mean"] for r in steps if "rollout/reward_mean" in r]
    step_s = [r["time/step_s"] for r in steps[2:] if "time/step_s" in r]
    kl = [r["trainer/mismatch_kl"] for r in steps if "trainer/mismatch_kl" in r]
    last = steps[-1]
    return {
        "run": run.name, "steps": len(steps),
        "reward_first5": statistics.fmean(rewards[:5]) if rewards else None,
        "reward_last5": statistics.fmean(rewards[-5:]) if rewards else None,
        "mismatch_kl_median": statistics.median(kl) if kl else None,
        "steady_step_s_median": statistics.median(step_s) if step_s else None,
        "drops": {k: v for k, v in last.items() if k.startswith("drops/")},
    }


if __name__ == "__main__":
    print(json.dumps(curve(Path(sys.argv[1]))))
