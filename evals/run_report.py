"""A run folder that explains itself: its plots (PNG) and an `index.md` saying what each file
there is. `rl`, `sft` and `eval` call `write_run_report` when they end; `swefleet report run DIR`
redraws any run folder from its records alone. A demo's folder is the RL run's, with the
`sft/` and `eval-<split>/` stage folders inside: they are drawn with it.

Kinds, told apart by the files each command writes: `eval` (`eval_run.json` or `report.json`),
`sft` (the trainer job's loss is `sft`, or `oracle_episodes.jsonl` without RL step records),
`rl` (step records, served versions or the started-episodes journal).
"""

from __future__ import annotations

import json
from pathlib import Path

from swefleet.evals.plots import Plot
from swefleet.evals.run_index import INDEX, index_markdown

from swefleet.rundir import read_jsonl, write_text_atomic

RL_MARKERS = ("metrics.jsonl", "weights.jsonl", "episodes.started.jsonl", "summary.json")


def run_kind(root: Path) -> str | None:
    """"rl", "sft" or "eval" for a run folder of that command; None for any other folder."""
    if (root / "eval_run.json").is_file() or (root / "report.json").is_file():
        return "eval"
    if _trainer_loss(root) == "sft" or ((root / "oracle_episodes.jsonl").is_file()
                                        and not (root / "metrics.jsonl").exists()):
        return "sft"
    if any((root / name).is_file() for name in RL_MARKERS):
        return "rl"
    return None


def _trainer_loss(root: Path) -> str | None:
    try:
        job = json.loads((root / "trainer_job.json").read_text())
    except (FileNotFoundError, ValueError):
        return None
    return (job.get("trainer") or {}).get("loss") if isinstance(job, dict) else None


def write_run_report(run_dir: str | Path) -> list[Plot]:
    """Draw the plots of the run folder `run_dir` (and of the stage folders inside an RL run:
    `sft/`, `eval-<split>/`), write its index.md; returns its plots, drawn or not. A folder that
    is no run folder is a ValueError."""
    root = Path(run_dir)
    kind = run_kind(root) if root.is_dir() else None
    if kind is None:
        raise ValueError(f"{root}: not a run folder of rl, sft, eval or demo (none of "
                         f"eval_run.json, report.json, trainer_job.json, {', '.join(RL_MARKERS)})")
    if kind == "rl":
        for stage in stage_folders(root):
            write_run_report(stage)
    plots = draw_plots(root, kind)
    write_text_atomic(root / INDEX, index_markdown(root, kind, plots))
    return plots


def stage_folders(root: Path) -> list[Path]:
    """The run folders of other stages inside `root` (`swefleet demo`: sft/, eval-<split>/)."""
    return sorted(p for p in root.iterdir()
                  if p.is_dir() and (p.name == "sft" or p.name.startswith("eval-"))
                  and run_kind(p) is not None)


def draw_plots(root: Path, kind: str) -> list[Plot]:
    from swefleet.evals.plots_train import rl_plots, sft_plots

    if kind == "eval":
        return _eval_plots(root)
    trainer = read_jsonl(root / "trainer_metrics.jsonl")
    if kind == "sft":
        return sft_plots(trainer, root)
    return rl_plots(read_jsonl(root / "metrics.jsonl"), trainer, root)


def _eval_plots(root: Path) -> list[Plot]:
    """The eval's plots, from its report.json (none yet: the eval has not finished)."""
    from swefleet.evals.plots import not_drawn
    from swefleet.evals.plots_eval import EVAL_PLOTS, eval_plots

    path = root / "report.json"
    if not path.exists():
        why = ("no report.json: the eval has not finished (`swefleet report eval DIR` computes "
               "it from episodes.jsonl)")
        return [not_drawn(root / name, about, why) for name, about in EVAL_PLOTS]
    report = json.loads(path.read_text())
    if "per_task" not in (report if isinstance(report, dict) else {}):
        raise ValueError(f"{path}: not an eval report (no per_task)")
    return eval_plots(report, root)
