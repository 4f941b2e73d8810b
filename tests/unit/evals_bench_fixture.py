"""Hand-made run directories for the bench/report tests (the numbers are checked by hand in the
tests; keep them in sync with the comments there).

Three complete runs of 6 steps and one incomplete run:
  run-0 step times 10, 4, 2, 2.25, 1.75, 2   (warm-up detected: 2)
  run-1 step times  8, 2.5, 2.5, 3, 2.5, 2.5 (warm-up detected: 1)
  run-2 step times  9, 3, 3, 3, 3.5, 2.5     (warm-up detected: 1; no trainer record for step 5)
  run-3 served 3 of 6 versions (incomplete, excluded)
Per step: wait_for_data = time - 1, train 0.5, export 0.25, trainer wait 0.125, sync 0.25,
tokens_per_s = 100 * (step + 1), 4 rollouts (run-1 step 3: 3).
"""

from __future__ import annotations

import json
from pathlib import Path

STEP_TIMES = {
    "run-0": [10, 4, 2, 2.25, 1.75, 2],
    "run-1": [8, 2.5, 2.5, 3, 2.5, 2.5],
    "run-2": [9, 3, 3, 3, 3.5, 2.5],
    "run-3": [7, 3, 3],
}
EPISODES = {
    "run-0": [("a", "resolved"), ("a", "unresolved"), ("b", "infra_error"), ("b", "resolved")],
    "run-1": [("a", "resolved"), ("c", "dropped_stale")],
}


def config(out: Path, steps: int = 6, groups_per_step: int = 2,
           checkpoint_every: int | None = None) -> dict:
    return {"name": "fixture", "output_dir": str(out),
            "orchestrator": {"steps": steps, "groups_per_step": groups_per_step,
                             "rollouts_per_task": 2, "async_level": 1},
            "trainer": {"lr": 1e-4, "checkpoint_every": checkpoint_every}}


def checkpoint_fields(step: int, every: int) -> dict:
    """What trainer/main.py adds to the record of `step` from `Saves.metrics()` when
    `checkpoint_every` is set: disk figures, the blocking seconds of the checkpoint started
    after this step (0.0 when none was), the background seconds of the newest finished one."""
    out = {"disk_free_gb": 412.5, "disk_paused_saves": 0,
           "checkpoint_blocking_s": 7.5 if (step + 1) % every == 0 else 0.0}
    if step >= every:  # the first save finished in the background during the next steps
        out["checkpoint_background_s"] = 3.25
    return out


def _jsonl(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def write_run(out: Path, times: list[float], *, steps: int = 6, groups_per_step: int = 2,
              episodes: list[tuple[str, str]] = (), skip_trainer_steps: tuple[int, ...] = (),
              rollouts: dict[int, int] | None = None,
              checkpoint_every: int | None = None) -> Path:
    out.mkdir(parents=True)
    (out / "config.json").write_text(json.dumps(config(out, steps, groups_per_step,
                                                       checkpoint_every)))
    served, weights, metrics, trainer = 0.0, [], [], []
    for step, t in enumerate(times):
        served += t
        weights.append({"version": step + 1, "served_at_s": served, "sync_s": 0.25})
        metrics.append({"step": step, "time/step_s": t, "time/wait_for_data_s": t - 1,
                        "time/weight_sync_s": 0.25,
                        "rollout/episodes": (rollouts or {}).get(step, 4), "batch/samples": 8})
        if step not in skip_trainer_steps:
            trainer.append({"step": step, "policy_version": step + 1, "loss": 0.1,
                            "step_time_s": 0.5, "export_time_s": 0.25, "wait_time_s": 0.125,
                            "tokens_per_s": 100.0 * (step + 1),
                            **(checkpoint_fields(step, checkpoint_every)
                               if checkpoint_every else {})})
    _jsonl(out / "weights.jsonl", weights)
    _jsonl(out / "metrics.jsonl", metrics)
    _jsonl(out / "trainer_metrics.jsonl", trainer)
    _jsonl(out / "episodes.jsonl", [{"episode_id": f"e{i}", "task_id": task, "status": status,
                                     "turns": []} for i, (task, status) in enumerate(episodes)])
    return out


def write_bench(root: Path, scale: float = 1.0, groups_per_step: int = 2,
                incomplete: bool = True) -> Path:
    """The fixture bench directory; `scale` multiplies every step time."""
    for name, times in STEP_TIMES.items():
        if name == "run-3" and not incomplete:
            continue
        write_run(root / name, [t * scale for t in times], groups_per_step=groups_per_step,
                  episodes=EPISODES.get(name, []),
                  skip_trainer_steps=(5,) if name == "run-2" else (),
                  rollouts={3: 3} if name == "run-1" else None)
    return root
