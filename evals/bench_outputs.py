"""The bench's outputs from its run directories: bench.json, bench.md, the PNGs and index.md."""

from __future__ import annotations

import json
from pathlib import Path

from swefleet.evals.plots import Plot

from swefleet.rundir import write_json_atomic, write_text_atomic


def write_bench_outputs(root: Path, plots: bool = True) -> dict:
    """Recompute the report from `root`'s run directories; write bench.json, bench.md, the PNGs
    (not with `plots` False) and the index.md of a bench folder (a run folder's own index stays);
    returns the report."""
    from swefleet.evals.run_files import run_kind
    from swefleet.evals.run_index import INDEX, index_markdown

    report, drawn = write_bench_files(root, plots)
    if run_kind(root) == "bench":
        write_text_atomic(root / INDEX, index_markdown(root, "bench", drawn))
    return report


def write_bench_files(root: Path, plots: bool = True) -> tuple[dict, list[Plot]]:
    """bench.json, bench.md and the PNGs of `root`; the report and its plots, drawn or not (all
    not drawn without `plots`: the PNGs of an earlier report stay)."""
    from swefleet.evals.bench_markdown import bench_markdown
    from swefleet.evals.bench_report import bench_report_from_dir
    from swefleet.evals.plots import BENCH_PLOTS, bench_plots

    env_path = root / "bench_env.json"
    env = json.loads(env_path.read_text()) if env_path.exists() else None
    report = bench_report_from_dir(root, env)
    drawn = (bench_plots(report, root) if plots else
             [Plot(name, about, missing="not redrawn (--no-plots)")
              for name, about in BENCH_PLOTS.items()])
    write_json_atomic(root / "bench.json", report)
    (root / "bench.md").write_text(bench_markdown(report, [p.name for p in drawn if p.written]))
    return report, drawn
