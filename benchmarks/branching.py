"""Fresh groups vs groups branched from a shared prefix: the same short RL run twice.

    python benchmarks/branching.py --config configs/quickstart.toml --steps 3 \
        --output-dir runs/branching-bench [--turn 0] [--set inference.kv_mode=dynamic]

Both runs start from the same SFT warm start (`swefleet sft`, made once under
`<output-dir>/sft`), with the same seed and steps; the second sets `[orchestrator.branching]`
(`enabled`, `source = "live"`, `turn`). Per run, from its `metrics.jsonl`: rollouts per second
of RL time (episodes batched over the last step's `time/since_start_s`; a live parent is not
a rollout), reward per step, prompt tokens sent to the fleet, those served from its prefix
cache (`infer/kv_hit_rate` x `infer/prompt_tokens`) and those prefilled; then the branched /
fresh ratios. One JSON object on the last line.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _swefleet(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "swefleet", *args], cwd=REPO, check=False,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0:
        raise SystemExit(f"swefleet {args[0]} failed ({done.returncode}):\n{done.stderr[-3000:]}")


def _sft(config: str, out: Path) -> Path:
    """The warm start's final checkpoint (made once; a later call reuses it)."""
    sft = out / "sft"
    _swefleet("sft", "--config", config, "--output-dir", str(sft))
    return max((sft / "weights").glob("v*"))


def _rl(config: str, out: Path, model: Path, steps: int, extra: list[str]) -> Path:
    sets = [f"model.path={model}", f"orchestrator.steps={steps}", *extra]
    _swefleet("rl", "--config", config, "--output-dir", str(out),
              *[a for s in sets for a in ("--set", s)])
    return out


def summarise(run: Path) -> dict:
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    prompt = sum(r.get("infer/prompt_tokens", 0.0) for r in steps)
    hits = sum(r.get("infer/kv_hit_rate", 0.0) * r.get("infer/prompt_tokens", 0.0)
               for r in steps)
    rollouts = sum(r["rollout/episodes"] for r in steps)
    seconds = steps[-1]["time/since_start_s"]
    last = steps[-1]
    return {
        "run": run.name, "steps": len(steps), "rollouts": rollouts, "rl_s": round(seconds, 1),
        "rollouts_per_s": rollouts / seconds,
        "reward_per_step": [round(r["rollout/reward_mean"], 3) for r in steps],
        "reward_mean": sum(r["rollout/reward_mean"] for r in steps) / len(steps),
        "prompt_tokens": int(prompt), "prefix_cache_hits": int(hits),
        "prefilled_tokens": int(prompt - hits),
        "kv_hit_rate": hits / prompt if prompt else 0.0,
        "restore_s_mean": _mean_restore(run),
        **{k: last[k] for k in last if k.startswith("branch/")},
    }


def _mean_restore(run: Path) -> float | None:
    """Mean seconds a branch took to restore its sandbox (None: no branch)."""
    times = [json.loads(line)["timings"].get("restore")
             for line in (run / "episodes.jsonl").read_text().splitlines()]
    times = [t for t in times if t is not None]
    return sum(times) / len(times) if times else None


def _table(rows: list[dict]) -> None:
    print(f"{'run':<10} {'rollouts/s':>10} {'reward/step':<32} {'prompt tok':>10} "
          f"{'cache hits':>10} {'prefilled':>10} {'hit rate':>8}")
    for r in rows:
        print(f"{r['run']:<10} {r['rollouts_per_s']:>10.3f} "
              f"{' '.join(f'{x:.2f}' for x in r['reward_per_step']):<32} "
              f"{r['prompt_tokens']:>10} {r['prefix_cache_hits']:>10} "
              f"{r['prefilled_tokens']:>10} {r['kv_hit_rate']:>8.2f}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", default="configs/quickstart.toml")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--turn", default="0", help="branching.turn: k, a fraction, or random")
    p.add_argument("--output-dir", type=Path, default=Path("runs/branching-bench"))
    p.add_argument("--set", action="append", default=[], dest="sets",
                   help="a config override for both runs (repeatable)")
    args = p.parse_args()
    out = args.output_dir.resolve()
    model = _sft(args.config, out)
    fresh = _rl(args.config, out / "fresh", model, args.steps, args.sets)
    branched = _rl(args.config, out / "branched", model, args.steps,
                   [*args.sets, "orchestrator.branching.enabled=true",
                    f"orchestrator.branching.turn={args.turn}"])
    rows = [summarise(fresh), summarise(branched)]
    _table(rows)
    ratio = {key: rows[1][key] / rows[0][key] if rows[0][key] else None
             for key in ("rollouts_per_s", "prefilled_tokens", "prompt_tokens", "reward_mean")}
    print(json.dumps({"config": args.config, "steps": args.steps, "turn": args.turn,
                      "sets": args.sets, "fresh": rows[0], "branched": rows[1],
                      "ratio_branched_over_fresh": ratio}))


if __name__ == "__main__":
    main()
