"""`swefleet report ...`: recompute reports and plots from raw records (nothing is run) and
compare them."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

from swefleet.rundir import read_jsonl, write_json_atomic


def report_bench_cli(args: argparse.Namespace) -> int:
    from swefleet.evals.bench_outputs import write_bench_outputs

    root = Path(args.dir)
    write_bench_outputs(root, plots=not args.no_plots)
    print((root / "bench.md").read_text())
    return 0


def report_eval_cli(args: argparse.Namespace) -> int:
    """Recompute `report.json`/`report.md` (and the success-by-task plot) from episodes.jsonl."""
    from swefleet.evals.report import build_report, report_markdown

    root = Path(args.dir)
    records = read_jsonl(root / "episodes.jsonl")
    if not records:
        raise SystemExit(f"{root}/episodes.jsonl: no episodes")
    bad = next((i for i, r in enumerate(records)
                if not isinstance(r, dict) or not {"task_id", "resolved"} <= r.keys()), None)
    if bad is not None:
        raise ValueError(f"{root}/episodes.jsonl: record {bad + 1} is not an eval episode (needs "
                         "task_id and resolved; an RL run's episodes are not an eval)")
    k = args.k or max(Counter(r["task_id"] for r in records).values())
    report = build_report(records, k)
    report.update(_run_fields(root, records, report, k))
    write_json_atomic(root / "report.json", report)
    md = report_markdown(report)
    if not args.no_plots:
        from swefleet.evals.plots_eval import write_eval_plots

        md += "".join(f"\n![{name}]({name})\n" for name in write_eval_plots(report, root))
    (root / "report.md").write_text(md)
    print(md)
    return 0


def _run_fields(root: Path, records: list[dict], report: dict, k: int) -> dict:
    """What the episodes alone do not tell and the eval wrote: the trained-task overlap, cost
    and serving fields of the old `report.json`, and the per-split figures (again at `k`, from
    the task file `eval_run.json` names; the old ones when it is gone and `k` is unchanged)."""
    import json

    from swefleet.envs.tasks import load_tasks
    from swefleet.evals.report import split_fields

    old = json.loads((root / "report.json").read_text()) if (root / "report.json").is_file() else {}
    kept = {key: v for key, v in old.items() if key not in report and key != "per_split"}
    meta = json.loads((root / "eval_run.json").read_text()) \
        if (root / "eval_run.json").is_file() else {}
    try:
        split_of = {t.instance_id: t.split for t in load_tasks(meta["tasks"], meta.get("split"))}
    except Exception:  # noqa: BLE001 - no meta, or its task file is gone or moved
        if "per_split" in old and len(old.get("pass_at_k", {})) == k:
            kept["per_split"] = old["per_split"]
        return kept
    return kept | split_fields(records, split_of, k)


def report_run_cli(args: argparse.Namespace) -> int:
    """Redraw a run folder's plots and index.md (rl, sft, eval, demo) from its records."""
    from swefleet.evals.run_report import write_run_report

    root = Path(args.dir)
    for plot in write_run_report(root):
        print(f"{plot.name}: " + ("drawn" if plot.written else f"not drawn ({plot.missing})"))
    print(f"index: {root / 'index.md'}")
    return 0


def _report_file(path: Path) -> Path:
    """`path`, or the report an eval or bench folder holds (`report.json`, `bench.json`)."""
    if not path.is_dir():
        return path
    for name in ("report.json", "bench.json"):
        if (path / name).is_file():
            return path / name
    raise ValueError(f"{path}: a folder with neither report.json nor bench.json (pass an eval "
                     "or bench output folder, or the JSON file itself)")


def report_compare_cli(args: argparse.Namespace) -> int:
    from swefleet.evals.compare import compare_markdown, compare_reports

    a, b = (json.loads(_report_file(Path(p)).read_text()) for p in (args.a, args.b))
    result = compare_reports(a, b, n_boot=args.n_boot, seed=args.seed)
    if args.json:
        write_json_atomic(Path(args.json), result)
    print(compare_markdown(result, args.a, args.b))
    return 0
