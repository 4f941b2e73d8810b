"""What each command writes into its output folder: the kind of a folder, told apart by those
files, and what each file there is (the descriptions `index.md` gives, `run_index.py`).

Kinds: `eval` (`eval_run.json` or `report.json`), `bench` (`bench_env.json` or `bench.json`
without a `config.json`),
`sft` (the trainer job's loss is `sft`, or demonstrations without RL step records), `demo` (a
demo's summary or stage times, or an RL folder holding stage folders: `sft/`, `eval-*/`) and
`rl` (step records, served versions or the started-episodes journal). `swefleet replay` and
`swefleet export` write into the folder they read (`replay_check.json`, `replays/`,
`mini-swe-agent/`).
"""

from __future__ import annotations

import json
from pathlib import Path

RL_MARKERS = ("metrics.jsonl", "weights.jsonl", "episodes.started.jsonl", "summary.json")
DEMO_MARKERS = ("demo_summary.md", "demo_summary.json", "demo_times.json")
BENCH_MARKERS = ("bench_env.json", "bench.json")


def run_kind(root: Path) -> str | None:
    """"rl", "sft", "eval", "demo" or "bench" for an output folder of that command; None for
    any other folder."""
    if (root / "eval_run.json").is_file() or (root / "report.json").is_file():
        return "eval"
    bench = any((root / name).is_file() for name in BENCH_MARKERS)
    if bench and not (root / "config.json").exists():  # (`swefleet report bench RUN` writes
        return "bench"  # a bench report into that run's folder)
    if _trainer_loss(root) == "sft" or ((root / "oracle_episodes.jsonl").is_file()
                                        and not (root / "metrics.jsonl").exists()):
        return "sft"
    if any((root / name).is_file() for name in DEMO_MARKERS):
        return "demo"
    if any((root / name).is_file() for name in RL_MARKERS):
        return "demo" if stage_folders(root) else "rl"
    return None


def _trainer_loss(root: Path) -> str | None:
    try:
        job = json.loads((root / "trainer_job.json").read_text())
    except (FileNotFoundError, ValueError):
        return None
    return (job.get("trainer") or {}).get("loss") if isinstance(job, dict) else None


def stage_folders(root: Path) -> list[Path]:
    """The run folders of a demo's other stages inside `root` (`sft/`, `eval-<split>*/`)."""
    return sorted(p for p in root.iterdir()
                  if p.is_dir() and (p.name == "sft" or p.name.startswith("eval-"))
                  and run_kind(p) in ("sft", "eval"))


def bench_runs(root: Path) -> list[Path]:
    """The `swefleet rl` run folders of a bench (`run-<i>/`, incomplete ones moved aside too)."""
    return sorted(p for p in root.iterdir()
                  if p.is_dir() and p.name.startswith("run-") and run_kind(p) == "rl")


TITLES = {
    "rl": "swefleet rl run folder",
    "sft": "swefleet sft run folder",
    "eval": "swefleet eval run folder",
    "demo": "swefleet demo run folder",
    "bench": "swefleet bench folder",
}
LEADS = {
    "rl": "`swefleet rl`: episodes sampled from the policy in sandboxes, graded, and trained on "
          "step by step. Start with `reward.png` and `summary.json`.",
    "sft": "`swefleet sft`: supervised fine-tuning on demonstrations. Start with `loss.png`; the "
           "checkpoint is in `weights/`.",
    "eval": "`swefleet eval`: every task attempted k times, each attempt graded by the task's "
            "tests. Start with `report.md`.",
    "demo": "`swefleet demo`: the whole loop in stages (SFT warm start, RL, held-out evals). "
            "Start with [`demo_summary.md`](demo_summary.md): every stage's result and time in "
            "one table.",
    "bench": "`swefleet bench`: the same RL config run several times for the same number of "
             "steps, to measure the step time and its spread. Start with `bench.md`.",
}

RUN_COMMON = {
    "config.json": "the resolved config the run started with",
    "config.resumed.json": "the config of the latest restart on this folder",
    "fingerprint.json": "what the results depend on (command, model and task hashes, settings): "
                        "a restart on this folder with different ones is refused",
    "logs/": "logs of the servers and the trainer",
    "replay_check.json": "how deterministic the replays of the recorded episodes are "
                         "(`swefleet replay --check`): episodes and turns that match",
    "replays/": "`swefleet replay`'s outputs: continued episodes (`<episode_id>.json`), their "
                "server logs, sandbox snapshots",
    "mini-swe-agent/": "the trajectories in mini-swe-agent's format (`swefleet export`)",
}
"""Entries of every run folder but a bench's; a kind's own table below takes precedence."""

TRAINING = {
    "trained_tasks.json": "the ids of the tasks the checkpoints were trained on (an eval "
                          "reports its overlap with them)",
    "trainer_job.json": "the job handed to the trainer process",
    "trainer_metrics.jsonl": "one record per optimizer step, written by the trainer (loss, KL, "
                             "entropy, timings; docs/metrics.md)",
    "batches/": "the batches handed to the trainer, one file per optimizer step",
    "weights/": "the checkpoints the trainer published (Hugging Face format, `vNNNNNN/`)",
    "trainer_checkpoints/": "the trainer's own checkpoints (optimizer state; a resume starts "
                            "from them)",
    "model/": "the starting model, created by the project (random init + tokenizer)",
}
"""Entries of the folders a trainer ran in (rl, sft, demo)."""

RL = {
    "episodes.jsonl": "one record per episode, appended as it ends: tokens, log-probs, policy "
                      "versions, status and reason, reward, grade",
    "episodes.started.jsonl": "one line per episode as it started (a restart settles the ones "
                              "a killed run never finished)",
    "metrics.jsonl": "one record per RL step: reward (mean, std, scored episodes), statuses, "
                     "drops, timings, fleet and trainer metrics (docs/metrics.md)",
    "weights.jsonl": "one record per policy version served: when, and how long the sync took",
    "drops.jsonl": "one record per drop: reason, count, the episodes it settled",
    "prefixes.jsonl": "the shared prefixes branched episodes started from "
                      "(`[orchestrator.branching]`)",
    "task_selection.json": "the tasks RL kept after the difficulty skips (`[tasks] "
                           "difficulty_key`): how many were kept and skipped",
    "summary.json": "the run's summary: steps, episodes by status, wall time, servers",
    "tensorboard/": "TensorBoard event files of the step metrics",
    "wandb/": "the Weights & Biases run (offline mode: `wandb sync` uploads it)",
    "slurm/": "the Slurm batch script and job id",
    "bench.json": "`swefleet report bench` of this run alone (docs/bench.md)",
    "bench.md": "`swefleet report bench` of this run alone, for reading",
    "step_time_hist.png": "plot of `swefleet report bench`: the steady-state step times",
    "phases.png": "plot of `swefleet report bench`: median seconds per phase",
    "success_by_task.png": "plot of `swefleet report bench`: rollout success by task",
}
SFT = {
    "config.json": "the resolved config of the SFT run",
    "oracle_episodes.jsonl": "the oracle's trajectories the model was fine-tuned on (gold "
                             "patch applied through the agent's scaffold)",
    "expert_episodes.jsonl": "the scripted expert's resolved trajectories the model was "
                             "fine-tuned on",
    "expert_demonstrations.json": "the expert's demonstrations: kept and dropped by reason, "
                                  "mean turns and tokens, wall time",
    "expert_dropped_episodes.jsonl": "the expert's episodes dropped after they ran (never "
                                     "trained on)",
    "weights/": "the final SFT checkpoint (Hugging Face format, `vNNNNNN/`)",
}
EVAL = {
    "config.json": "the resolved config the eval ran with",
    "episodes.jsonl": "one record per episode: task, attempt, status and reason, resolved, "
                      "patch, grade",
    "episodes.retried.jsonl": "the episodes a restart ran again (infra errors), moved out of "
                              "episodes.jsonl with why they failed",
    "eval_run.json": "what the eval ran: agent, model, tasks, selection, k, run id",
    "report.json": "the report (schema swefleet.eval/2): success rate and its 95% CI, "
                   "pass@k, pass^k, per-task outcomes",
    "report.md": "the report for reading",
    "predictions.jsonl": "SWE-bench predictions: the first attempt's patch per task",
    "trajectories/": "every episode's full trajectory, `<task>/<attempt>.json`",
    "logs/": "SWE-bench per-instance logs (`run_evaluation/`) and server logs",
}
DEMO = {
    "demo_summary.md": "start here: every stage's result and time in one table (SFT loss, "
                       "reward per step and its trend, the demonstrations' probability, "
                       "held-out success with its 95% CI, paired tests between the evals)",
    "demo_summary.json": "the figures of `demo_summary.md`, for programs",
    "demo_times.json": "each stage's wall time in seconds, from the run that did it (a resumed "
                       "demo keeps the finished stages' times)",
    "sft/": "stage: the SFT warm start, with its own index.md",
    "eval-*-base/": "stage: the eval of the starting model on the held-out tasks, with its own "
                    "index.md",
    "eval-*-sft/": "stage: the eval of the SFT checkpoint on the held-out tasks, with its own "
                   "index.md",
    "eval-*/": "stage: the eval of the final RL checkpoint on the held-out tasks, with its own "
               "index.md",
}
"""A demo folder is the RL run's, with these beside its files (the patterns of the eval stage
folders are tried in this order)."""
BENCH = {
    "bench_env.json": "what the bench ran and where: config file, steps, runs, `--set` values, "
                      "host, CPUs, GPUs; the machine's load and GPU clocks before and after "
                      "each run",
    "bench.json": "the report (schema swefleet.bench/2): step time median, p90 and spread over "
                  "the steady-state steps, phases, rollouts, throughput (docs/bench.md)",
    "bench.md": "the report for reading, with its plots",
    "run-*.incomplete-*/": "an incomplete run moved aside when the bench was run again (that "
                           "run started over)",
    "run-*.log": "the output of that `swefleet rl` run",
    "run-*/": "one `swefleet rl` run of the config, with its own index.md",
}

TABLES = {
    "rl": {**RUN_COMMON, **TRAINING, **RL},
    "sft": {**RUN_COMMON, **TRAINING, **SFT},
    "eval": {**RUN_COMMON, **EVAL},
    "demo": {**RUN_COMMON, **TRAINING, **RL, **DEMO},
    "bench": BENCH,
}
"""kind -> entry name or fnmatch pattern (a directory's ends with "/") -> what it is."""

FIRST = {
    "demo": ("demo_summary.md", "demo_summary.json", "demo_times.json"),
    "eval": ("report.md", "report.json"),
    "bench": ("bench.md", "bench.json"),
    "rl": ("summary.json",),
}
"""The entries an index lists first, in this order, when present; the others follow by name."""
