"""The sandbox side of a SWE step, which the analytic plan does not model: measured figures.

An RL run records, per step, the mean seconds an episode spent starting its sandbox, running
its commands and being graded (`rollout/phase_sandbox_mean_s`, `phase_env_mean_s`,
`phase_grading_mean_s` in `metrics.jsonl`). `measured_phases` takes their medians over the
run's steps after the first (warm-up); `with_environment` adds them to a plan: each wave of
in-flight rollouts (`ceil(rollouts_per_step / inflight_rollouts)`) pays them once, on top of
the model's decode and prefill time.
"""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

from swefleet.app.plan import formulas as f

PHASES = {"sandbox_s": "rollout/phase_sandbox_mean_s", "commands_s": "rollout/phase_env_mean_s",
          "grading_s": "rollout/phase_grading_mean_s"}


def measured_phases(run_dir: str | Path) -> dict[str, float]:
    """Median per-episode seconds of each sandbox phase over the run's steps after the first;
    ValueError (one line) for a folder without them."""
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise ValueError(f"--run {run_dir}: no metrics.jsonl (not an rl run folder)")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if all(isinstance(r.get(k), (int, float)) for k in PHASES.values())]
    if not rows:
        raise ValueError(f"--run {run_dir}: its steps record no sandbox phase times "
                         f"({', '.join(PHASES.values())}): not a SWE run")
    steady = rows[1:] or rows
    out = {name: statistics.median(r[key] for r in steady) for name, key in PHASES.items()}
    return out | {"steps_measured": len(steady)}


def with_environment(result: dict, phases: dict[str, float], workload) -> dict:
    """`result` (a plan) with an `environment` section and the step recomputed with it."""
    inflight = workload.inflight_rollouts or workload.rollouts_per_step
    waves = math.ceil(workload.rollouts_per_step / inflight)
    per_rollout = phases["sandbox_s"] + phases["commands_s"] + phases["grading_s"]
    step = result["step"]
    rollout_s = step["rollout_s"] + waves * per_rollout
    step_s = f.step_seconds(rollout_s, step["train_s"], step["weight_sync_s"], step["mode"])
    result["environment"] = {**phases, "per_rollout_s": per_rollout, "waves_per_step": waves,
                             "rollout_s_with_environment": rollout_s, "step_s": step_s}
    return result
