"""The bench's outputs from its run directories: bench.json, bench.md and the PNGs."""

from __future__ import annotations

import json
from pathlib import Path

from swefleet.rundir import write_json_atomic


def write_bench_outputs(root: Path, plots: bool = True) -> dict:
    """Recompute the report from `root`'s run directories; write bench.json, bench.md, PNGs."""

    from swefleet.evals.bench_markdown import bench_markdown
    from swefleet.evals.bench_report import bench_report_from_dir

    env_path = root / "bench_env.json"
    env = json.loads(env_path.read_text()) if env_path.exists() else None
    report = bench_report_from_dir(root, env)
    names: list[str] = []
    if plots:
        from swefleet.evals.plots import write_bench_plots

        names = write_bench_plots(report, root)
    write_json_atomic(root / "bench.json", report)
    (root / "bench.md").write_text(bench_markdown(report, names))
    return report
