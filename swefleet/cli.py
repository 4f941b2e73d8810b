"""`swefleet` command line. Thin: parses arguments and imports the room that does the work
only when its command runs, so `swefleet --help` never imports torch or docker."""

from __future__ import annotations

import argparse
import logging
import sys


def _rl(args: argparse.Namespace) -> int:
    from swefleet.orchestrator.run import run_rl
    from swefleet.config import load_config

    cfg = load_config(args.config, args.set, servers=args.server)
    if args.output_dir:
        cfg.output_dir = args.output_dir
    return run_rl(cfg)


def _eval(args: argparse.Namespace) -> int:
    from swefleet.evals.run import run_eval_cli

    return run_eval_cli(args)


def _bench(args: argparse.Namespace) -> int:
    from swefleet.evals.bench import run_bench_cli

    return run_bench_cli(args)


def _report(args: argparse.Namespace) -> int:
    from swefleet.evals import report_cli

    handler = {"bench": report_cli.report_bench_cli, "eval": report_cli.report_eval_cli,
               "compare": report_cli.report_compare_cli}[args.report_cmd]
    return handler(args)


def _images(args: argparse.Namespace) -> int:
    from swefleet.envs import images

    if args.images_cmd == "build-base":
        print(images.build_base_image(args.tag, force=args.force, mirror=args.mirror))
    elif args.images_cmd == "prune":
        for tag in images.prune_images(older_than_days=args.older_than_days):
            print(f"removed {tag}")
    return 0


def _tasks(args: argparse.Namespace) -> int:
    from swefleet.envs.synth import cli

    return {"generate": cli.generate_cli, "validate": cli.validate_cli}[args.tasks_cmd](args)


def _plan(args: argparse.Namespace) -> int:
    from swefleet.plan.cli import plan_cli

    return plan_cli(args)


def _slurm(args: argparse.Namespace) -> int:
    from swefleet.slurm.submit import slurm_cli

    return slurm_cli(args)


def _clean(args: argparse.Namespace) -> int:
    from swefleet.envs.reaper import remove_run_containers

    n = remove_run_containers(args.run_id)
    print(f"removed {n} containers")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="swefleet", description=__doc__)
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="cmd", required=True)

    rl = sub.add_parser("rl", help="run RL training (rollouts + trainer + weight sync)")
    rl.add_argument("--config", required=True, help="TOML config (see configs/)")
    rl.add_argument("--output-dir", default="", help="run directory (default runs/<name>-<time>)")
    rl.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config field, e.g. --set orchestrator.steps=3")
    rl.add_argument("--server", action="append", default=[], metavar="URL",
                    help="a running OpenAI-compatible server (repeat for several); replaces "
                         "inference.servers, kind external")
    rl.set_defaults(func=_rl)

    ev = sub.add_parser("eval", help="evaluate an agent/checkpoint on a task set")
    ev.add_argument("--tasks", required=True, help="task file (JSONL/JSON/Parquet)")
    ev.add_argument("--split", default=None, help="only this split (e.g. heldout)")
    ev.add_argument("--agent", default="model",
                    choices=["model", "oracle", "empty", "predictions"],
                    help="oracle applies the gold patch, empty submits nothing, predictions grades "
                         "the patches of --predictions, model runs the agent")
    ev.add_argument("--predictions", default="",
                    help="SWE-bench predictions file (JSONL/JSON) for --agent predictions")
    ev.add_argument("--model", default="", help="HF checkpoint dir served by the embedded engine")
    ev.add_argument("--server", action="append", default=[], metavar="URL",
                    help="a running OpenAI-compatible server (repeat for several); replaces "
                         "inference.servers, kind external")
    ev.add_argument("--config", default="", help="TOML config for agent/envs/inference sections")
    ev.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config field, e.g. --set envs.max_concurrent=16")
    ev.add_argument("-k", type=int, default=1, help="attempts per task")
    ev.add_argument("--output-dir", required=True, help="writes report.json here")
    ev.set_defaults(func=_eval)

    _add_bench_parsers(sub)

    im = sub.add_parser("images", help="sandbox images without a registry")
    im_sub = im.add_subparsers(dest="images_cmd", required=True)
    b = im_sub.add_parser("build-base", help="bootstrap the base image from Debian packages")
    b.add_argument("--tag", default="swefleet-base:bookworm")
    b.add_argument("--mirror", default="http://deb.debian.org/debian")
    b.add_argument("--force", action="store_true", help="rebuild even if the tag exists")
    pr = im_sub.add_parser("prune", help="remove task images not used for a while")
    pr.add_argument("--older-than-days", type=float, default=7.0)
    im.set_defaults(func=_images)

    _add_tasks_parsers(sub)

    pl = sub.add_parser("plan", help="capacity and cost plan of a layout (docs/planning.md)")
    src = pl.add_mutually_exclusive_group(required=True)
    src.add_argument("--layout", help="layout TOML (see configs/layouts/)")
    src.add_argument("--config", help="run config TOML: plan its model and roles")
    pl.set_defaults(func=_plan)

    sl = sub.add_parser("slurm", help="run `rl` as one Slurm batch job (docs/cluster.md)")
    sl.add_argument("--config", required=True, help="TOML config with a [slurm] section")
    sl.add_argument("--nodes", type=int, default=None,
                    help="total nodes: those not slurm.inference_nodes train")
    sl.add_argument("--output-dir", default="", help="run directory, on a shared filesystem")
    sl.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config field, e.g. --set slurm.partition=gpu")
    sl.add_argument("--dry-run", action="store_true", help="print the batch script, submit nothing")
    sl.set_defaults(func=_slurm)

    cl = sub.add_parser("clean", help="remove containers left by runs")
    cl.add_argument("--run-id", default=None, help="only this run (default: all swefleet runs)")
    cl.set_defaults(func=_clean)
    return p


def _add_bench_parsers(sub) -> None:
    be = sub.add_parser("bench", help="step-time benchmark: run a config R times for N steps")
    be.add_argument("--config", required=True, help="TOML config (see configs/)")
    be.add_argument("--steps", type=int, default=10, help="steps per run (>= 2; step 0 is warm-up)")
    be.add_argument("--runs", type=int, default=3, help="independent runs")
    be.add_argument("--output-dir", required=True, help="run-<i>/ dirs, bench.json, bench.md, PNGs")
    be.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="config override passed to every run")
    be.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    be.set_defaults(func=_bench)

    rp = sub.add_parser("report", help="recompute reports from raw records; compare two reports")
    rp_sub = rp.add_subparsers(dest="report_cmd", required=True)
    rb = rp_sub.add_parser("bench", help="bench.json/.md/PNGs from DIR/run-<i>/ (runs nothing)")
    rb.add_argument("dir", help="bench output dir (or a single run dir)")
    rb.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    re_ = rp_sub.add_parser("eval", help="report.json/.md/PNG from DIR/episodes.jsonl")
    re_.add_argument("dir", help="eval output dir")
    re_.add_argument("-k", type=int, default=0, help="pass@k up to k (default: most attempts)")
    re_.add_argument("--no-plots", action="store_true", help="skip the PNG plot")
    rc = rp_sub.add_parser("compare", help="deltas A -> B and whether each is beyond noise")
    rc.add_argument("a", help="bench.json or report.json (baseline)")
    rc.add_argument("b", help="bench.json or report.json (candidate), same schema as A")
    rc.add_argument("--json", default="", help="also write the comparison here")
    rc.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples")
    rc.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    rp.set_defaults(func=_report)


def _add_tasks_parsers(sub) -> None:
    ts = sub.add_parser("tasks", help="generate and validate task sets (docs/tasks.md)")
    ts_sub = ts.add_subparsers(dest="tasks_cmd", required=True)
    ge = ts_sub.add_parser("generate", help="bug tasks from a PyPI package recipe (envs/recipes)")
    ge.add_argument("--recipe", action="append", required=True,
                    help="recipe TOML (repeat for several packages)")
    ge.add_argument("--n", type=int, default=12, help="tasks per package")
    ge.add_argument("--out", required=True,
                    help="task file (JSONL); this package's tasks are replaced, others kept")
    ge.add_argument("--seed", type=int, default=0, help="orders the candidate bugs")
    ge.add_argument("-k", type=int, default=2, help="runs per state; disagreeing tests dropped")
    ge.add_argument("--concurrency", type=int, default=2, help="test runs at a time")
    ge.add_argument("--max-candidates", type=int, default=0,
                    help="candidates to try per package (0: 12 per task)")
    ge.add_argument("--base-image", default="swefleet-base:bookworm")
    ge.add_argument("--report", default="", help="also write the per-package report (JSON)")
    va = ts_sub.add_parser("validate", help="gold resolves, empty does not, k runs agree")
    va.add_argument("file", help="task file (JSONL/JSON/Parquet)")
    va.add_argument("-k", type=int, default=2, help="runs of each patch per task")
    va.add_argument("--split", default=None, help="only this split")
    va.add_argument("--limit", type=int, default=0, help="only the first N tasks")
    va.add_argument("--concurrency", type=int, default=2, help="test runs at a time")
    va.add_argument("--timeout", type=float, default=300, help="deadline of one grading run")
    va.add_argument("--base-image", default="swefleet-base:bookworm")
    va.add_argument("--json", default="", help="also write the summary (JSON)")
    ts.set_defaults(func=_tasks)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", datefmt="%H:%M:%S",
    )
    for noisy in ("httpx", "httpcore", "urllib3", "docker"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as e:  # bad input: say what and where, no traceback
        if args.verbose:
            raise
        print(f"swefleet {args.cmd}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
