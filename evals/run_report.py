"""An output folder that explains itself: its plots (PNG) and an `index.md` saying what each
file there is. `rl`, `sft`, `eval`, `demo`, `bench` and `replay` call `write_run_report` when
they end; `swefleet report run DIR` redraws any such folder from its records alone. A demo's
folder is the RL run's, with its other stages' folders inside (`sft/`, `eval-<split>*/`); a
bench's holds its RL runs (`run-<i>/`): they are drawn with it. The kinds and their files:
`run_files.py`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from swefleet.evals.plots import Plot
from swefleet.evals.run_files import (
    BENCH_MARKERS,
    RL_MARKERS,
    bench_runs,
    run_kind,
    stage_folders,
)
from swefleet.evals.run_index import INDEX, index_markdown

from swefleet.rundir import read_jsonl, write_text_atomic

__all__ = ["run_kind", "stage_folders", "write_run_report"]


def write_run_report(run_dir: str | Path) -> list[Plot]:
    """Draw the plots of the output folder `run_dir` and of the folders inside it (a demo's
    stages, a bench's runs), write their index.md; returns the plots, drawn or not (those of an
    inner folder named `<folder>/<file>`). A folder of no command is a ValueError."""
    root = Path(run_dir)
    kind = _kind(root)
    inner: list[Plot] = []
    for folder in (stage_folders(root) if kind == "demo" else
                   bench_runs(root) if kind == "bench" else []):
        inner += [replace(p, name=f"{folder.name}/{p.name}") for p in write_run_report(folder)]
    plots = draw_plots(root, kind)
    write_text_atomic(root / INDEX, index_markdown(root, kind, plots))
    return plots + inner


def _kind(root: Path) -> str:
    kind = run_kind(root) if root.is_dir() else None
    if kind is None:
        raise ValueError(f"{root}: not a run folder of rl, sft, eval, demo or bench (none "
                         f"of eval_run.json, report.json, trainer_job.json, "
                         f"{', '.join((*BENCH_MARKERS, *RL_MARKERS))})")
    return kind


def draw_plots(root: Path, kind: str) -> list[Plot]:
    from swefleet.evals.plots_train import rl_plots, sft_plots

    if kind == "eval":
        return _eval_plots(root)
    if kind == "bench":
        from swefleet.evals.bench_outputs import write_bench_files

        return write_bench_files(root)[1]
    trainer = read_jsonl(root / "trainer_metrics.jsonl")
    if kind == "sft":
        return sft_plots(trainer, root)
    plots = rl_plots(read_jsonl(root / "metrics.jsonl"), trainer, root)
    if kind == "demo":
        plots.append(_demonstrations_plot(root))
    return plots


def _demonstrations_plot(root: Path) -> Plot:
    from swefleet.evals.plots_train import demonstrations_plot

    try:
        summary = json.loads((root / "demo_summary.json").read_text())
    except (FileNotFoundError, ValueError):
        summary = {}
    p = (summary.get("rl") or {}).get("p_demonstrations") or {}
    return demonstrations_plot(p.get("per_step") or [], root)


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
