"""`index.md` of a run folder: what each entry there is, generated from what is present (plots
included), and the plots that were not drawn and why."""

from __future__ import annotations

import fnmatch
import json
from pathlib import Path

from swefleet.evals.plots import Plot

INDEX = "index.md"

COMMON = {
    "config.json": "the resolved config the run started with",
    "config.resumed.json": "the config of the latest restart on this folder",
    "fingerprint.json": "what the results depend on (command, model and task hashes, settings): "
                        "a restart on this folder with different ones is refused",
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
    "logs/": "logs of the servers and the trainer",
}
"""Entries every kind of run folder may hold; the kinds' own tables below take precedence."""

BY_KIND = {
    "rl": {
        "episodes.jsonl": "one record per episode, appended as it ends: tokens, log-probs, "
                          "policy versions, status and reason, reward, grade",
        "episodes.started.jsonl": "one line per episode as it started (a restart settles the "
                                  "ones a killed run never finished)",
        "metrics.jsonl": "one record per RL step: reward, statuses, drops, timings, fleet and "
                         "trainer metrics (docs/metrics.md)",
        "weights.jsonl": "one record per policy version served: when, and how long the sync "
                         "took",
        "drops.jsonl": "one record per drop: reason, count, the episodes it settled",
        "summary.json": "the run's summary: steps, episodes by status, wall time, servers",
        "tensorboard/": "TensorBoard event files of the step metrics",
        "wandb/": "the Weights & Biases run (offline mode: `wandb sync` uploads it)",
        "slurm/": "the Slurm batch script and job id",
        "sft/": "the SFT warm start before RL (`swefleet demo`), with its own index.md",
        "eval-*/": "the eval of the final checkpoint (`swefleet demo`), with its own index.md",
    },
    "sft": {
        "oracle_episodes.jsonl": "the oracle's trajectories the model was fine-tuned on",
        "weights/": "the final SFT checkpoint (Hugging Face format, `vNNNNNN/`)",
    },
    "eval": {
        "episodes.jsonl": "one record per episode: task, attempt, status and reason, resolved, "
                          "patch, grade",
        "eval_run.json": "what the eval ran: agent, model, tasks, selection, k, run id",
        "report.json": "the report (schema swefleet.eval/2): success rate and its 95% CI, "
                       "pass@k, pass^k, per-task outcomes",
        "report.md": "the report for reading",
        "predictions.jsonl": "SWE-bench predictions: the first attempt's patch per task",
        "swebench_report.json": "SWE-bench's run report of the first attempts",
        "trajectories/": "every episode's full trajectory, `<task>/<attempt>.json`",
        "logs/": "SWE-bench per-instance logs (`run_evaluation/`) and server logs",
        "mini-swe-agent/": "the trajectories in mini-swe-agent's format (`swefleet export`)",
    },
}
UNKNOWN = "not written by swefleet"


def describe(name: str, kind: str, plots: dict[str, Plot], named: dict[str, str]) -> str:
    """What the entry `name` (a directory name ends with "/") of a `kind` folder is; `named`:
    descriptions of the entries this folder names at run time."""
    if name in plots:
        return f"plot: {plots[name].about}"
    table = {**COMMON, **BY_KIND.get(kind, {}), **named}
    if name in table:
        return table[name]
    return next((text for pattern, text in table.items() if fnmatch.fnmatch(name, pattern)),
                UNKNOWN)


def entries(root: Path) -> list[str]:
    """The folder's entries an index lists: all but itself and hidden ones (temp files)."""
    return sorted(p.name + ("/" if p.is_dir() else "") for p in root.iterdir()
                  if p.name != INDEX and not p.name.startswith("."))


def run_named(root: Path, kind: str) -> dict[str, str]:
    """Entries whose names the run chose: an eval's SWE-bench run report,
    `<model>.<run_id>.json` (named in its eval_run.json)."""
    try:
        meta = json.loads((root / "eval_run.json").read_text()) if kind == "eval" else {}
    except (FileNotFoundError, ValueError):
        return {}
    model, run_id = meta.get("model_name_or_path"), meta.get("run_id")
    if not (isinstance(model, str) and isinstance(run_id, str)):
        return {}
    return {f"{model.replace('/', '__')}.{run_id}.json": "SWE-bench's run report of the first "
            "attempts (`<model>.<run_id>.json`, as the harness names it)"}


def index_markdown(root: Path, kind: str, plots: list[Plot]) -> str:
    drawn = {p.name: p for p in plots if p.written}
    named = run_named(root, kind)
    lines = [f"# {kind} run folder", "",
             "What each file here is. `swefleet report run DIR` redraws the plots and this index.",
             "", "| file | what it is |", "|---|---|"]
    lines += [f"| `{name}` | {describe(name, kind, drawn, named)} |" for name in entries(root)]
    missing = [p for p in plots if not p.written]
    if missing:
        lines += ["", "Plots not drawn (no file is written for a plot without data):", ""]
        lines += [f"- `{p.name}` ({p.about}): {p.missing}" for p in missing]
    return "\n".join(lines) + "\n"
