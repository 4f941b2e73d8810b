"""`swefleet` command line. Thin: parses arguments and imports the room that does the work
only when its command runs, so `swefleet --help` never imports torch or docker."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path


def _rl(args: argparse.Namespace) -> int:
    from swefleet.app.config import check_model_path, load_config
    from swefleet.app.rl import run_rl

    cfg = load_config(args.config, args.set, servers=args.server)
    check_model_path(cfg.model)
    if args.output_dir:
        cfg.output_dir = args.output_dir
    return run_rl(cfg)


def _eval(args: argparse.Namespace) -> int:
    from swefleet.app.eval import run_eval_cli

    return run_eval_cli(args)


def _bench(args: argparse.Namespace) -> int:
    from swefleet.app.bench import run_bench_cli

    return run_bench_cli(args)


def _report(args: argparse.Namespace) -> int:
    from swefleet.app import report as report_cli

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
    from swefleet.app import synth as cli

    return {"generate": cli.generate_cli, "validate": cli.validate_cli}[args.tasks_cmd](args)


def _plan(args: argparse.Namespace) -> int:
    from swefleet.app.plan.cli import plan_cli

    return plan_cli(args)


def _slurm(args: argparse.Namespace) -> int:
    from swefleet.app.slurm.submit import slurm_cli

    return slurm_cli(args)


def _clean(args: argparse.Namespace) -> int:
    from swefleet.envs.reaper import clean_everywhere

    removed, kept = clean_everywhere(args.run_id, everything=args.all)
    print(f"removed {removed} containers")
    if kept:
        print(f"kept {kept} containers of live runs (or of runs on another host, which cannot "
              "be checked from here); --all removes them too")
    return 0


def _config(args: argparse.Namespace) -> int:
    from swefleet.app.config_doc import show_cli

    return show_cli(args)


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    """Shows each option's default (unless it is empty) and keeps the examples' line breaks."""

    def _get_help_string(self, action: argparse.Action) -> str:
        empty = action.default is None or action.default is False or action.default in ("", [])
        if empty or action.default is argparse.SUPPRESS:
            return action.help or ""
        return super()._get_help_string(action)


class _Parser(argparse.ArgumentParser):
    """Every (sub)command's parser: defaults in its help, examples in its epilog."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("formatter_class", _Formatter)
        super().__init__(*args, **kwargs)


def _export(args: argparse.Namespace) -> int:
    from swefleet.evals.export import export_mini_swe_agent

    dest = export_mini_swe_agent(Path(args.dir), Path(args.out) if args.out else None,
                                 tokenizer_dir=args.tokenizer)
    print(f"wrote {dest}")
    return 0


def build_parser() -> argparse.ArgumentParser:
    from swefleet import __version__
    from swefleet.app.eval_args import add_eval_harness_args, add_export_parser

    p = _Parser(prog="swefleet", description="Train and evaluate coding agents on long, "
                "multi-turn software-engineering episodes.")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    p.add_argument("--version", action="version", version=f"swefleet {__version__}")
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
    ev.add_argument("--tasks", required=True,
                    help="task file (JSONL/JSON/Parquet; SWE-bench exports too: docs/tasks.md)")
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
    add_eval_harness_args(ev)
    ev.set_defaults(func=_eval)

    _add_bench_parsers(sub)

    im = sub.add_parser("images", help="sandbox images without a registry")
    im_sub = im.add_subparsers(dest="images_cmd", required=True)
    b = im_sub.add_parser("build-base", help="bootstrap the base image from Debian packages")
    b.add_argument("--tag", default="swefleet-base:bookworm", help="image tag to build")
    b.add_argument("--mirror", default="http://deb.debian.org/debian",
                   help="Debian mirror for debootstrap")
    b.add_argument("--force", action="store_true", help="rebuild even if the tag exists")
    pr = im_sub.add_parser("prune", help="remove task images not used for a while")
    pr.add_argument("--older-than-days", type=float, default=7.0,
                    help="remove task images unused for this many days")
    im.set_defaults(func=_images)

    _add_tasks_parsers(sub)
    _add_sft_parsers(sub)

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

    cl = sub.add_parser("clean", help="remove containers left by dead runs")
    cl.add_argument("--run-id", default=None, help="only this run (default: all swefleet runs)")
    cl.add_argument("--all", action="store_true",
                    help="also containers of live runs (other users' too): stops those runs")
    cl.set_defaults(func=_clean)

    cf = sub.add_parser("config", help="show a config with every field's doc (docs/config.md)")
    cf_sub = cf.add_subparsers(dest="config_cmd", required=True)
    sh = cf_sub.add_parser("show", help="the merged config (file + --set) as commented TOML")
    sh.add_argument("--config", default="", help="TOML config (default: the built-in defaults)")
    sh.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config field, e.g. --set orchestrator.steps=3")
    cf.set_defaults(func=_config)
    add_export_parser(sub, _export)
    _add_examples(p)
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
    ge.add_argument("--base-image", default="swefleet-base:bookworm",
                    help="base image of the task images")
    ge.add_argument("--report", default="", help="also write the per-package report (JSON)")
    va = ts_sub.add_parser("validate", help="gold resolves, empty does not, k runs agree")
    va.add_argument("file", help="task file (JSONL/JSON/Parquet)")
    va.add_argument("-k", type=int, default=2, help="runs of each patch per task")
    va.add_argument("--split", default=None, help="only this split")
    va.add_argument("--limit", type=int, default=0, help="only the first N tasks")
    va.add_argument("--concurrency", type=int, default=2, help="test runs at a time")
    va.add_argument("--timeout", type=float, default=None,
                    help="deadline of one grading run (default: envs.grading.timeout_s, 300)")
    va.add_argument("--config", default="",
                    help="TOML config whose [envs] (grading resources, image_user) apply")
    va.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config field, e.g. --set envs.grading.memory_mb=4096")
    va.add_argument("--base-image", default="swefleet-base:bookworm",
                    help="base image of the task images")
    va.add_argument("--json", default="", help="also write the summary (JSON)")
    ts.set_defaults(func=_tasks)


#: `swefleet <command> --help` ends with these (keys: the command's words after `swefleet`)
EXAMPLES: dict[str, list[str]] = {
    "": ["swefleet rl --config configs/quickstart.toml",
         "swefleet eval --agent oracle --tasks envs/data/quickstart/tasks.jsonl --output-dir out/o",
         "swefleet config show --config configs/quickstart.toml",
         "swefleet <command> --help"],
    "rl": ["swefleet rl --config configs/quickstart.toml --set orchestrator.steps=4",
           "swefleet rl --config configs/gpu_embedded.toml --output-dir runs/gpu  # resumes"],
    "eval": [("swefleet eval --agent oracle --tasks envs/data/quickstart/tasks.jsonl "
              "--output-dir out/oracle"),
             ("swefleet eval --agent model --model runs/RUN/weights/v000002 "
              "--tasks envs/data/quickstart/tasks.jsonl --split heldout -k 4 --output-dir out/ckpt")],
    "bench": [("swefleet bench --config configs/quickstart.toml --steps 5 --runs 3 "
               "--output-dir out/bench")],
    "report": ["swefleet report bench out/bench", "swefleet report compare A.json B.json"],
    "report bench": ["swefleet report bench out/bench --no-plots"],
    "report eval": ["swefleet report eval out/oracle -k 4"],
    "report compare": ["swefleet report compare out/a/bench.json out/b/bench.json --json d.json"],
    "images": ["swefleet images build-base", "swefleet images prune --older-than-days 7"],
    "images build-base": ["swefleet images build-base --force --mirror http://deb.debian.org/debian"],
    "images prune": ["swefleet images prune --older-than-days 3"],
    "tasks": ["swefleet tasks generate --recipe envs/recipes/toolz.toml --n 12 --out t.jsonl",
              "swefleet tasks validate t.jsonl -k 2"],
    "tasks generate": [("swefleet tasks generate --recipe envs/recipes/toolz.toml --n 12 "
                        "--out my_tasks.jsonl")],
    "tasks validate": ["swefleet tasks validate envs/data/quickstart/tasks.jsonl -k 2 --limit 3"],
    "plan": ["swefleet plan --layout configs/layouts/glm5_28x8.toml",
             "swefleet plan --config configs/gpu_vllm.toml"],
    "slurm": ["swefleet slurm --config configs/slurm_cpu.toml --dry-run",
              "swefleet slurm --config configs/slurm_vllm_4node.toml --nodes 4"],
    "clean": ["swefleet clean", "swefleet clean --run-id RUN_ID"],
    "export": ["swefleet export mini-swe-agent out/oracle",
               "swefleet export mini-swe-agent out/ckpt --tokenizer runs/RUN/weights/v000002"],
    "config": ["swefleet config show --config configs/quickstart.toml"],
    "config show": ["swefleet config show --config configs/gpu_vllm.toml --set inference.num_servers=2",
                    "swefleet config show   # the defaults"],
}


def subparsers(p: argparse.ArgumentParser, words: str = ""):
    """`(words, parser)` of `p` and every (sub)command below it."""
    yield words, p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, child in action.choices.items():
                child.description = child.description or helps.get(name)
                yield from subparsers(child, f"{words} {name}".strip())


def _add_examples(p: argparse.ArgumentParser) -> None:
    """Each (sub)command's examples as its epilog, its one-line help as its description."""
    for words, parser in subparsers(p):
        if words in EXAMPLES and not parser.epilog:
            parser.epilog = "examples:\n" + "\n".join(f"  {ex}" for ex in EXAMPLES[words])


def _sft(args: argparse.Namespace) -> int:
    from swefleet.app.sft import sft_cli

    return sft_cli(args)


def _demo(args: argparse.Namespace) -> int:
    from swefleet.app.demo import demo_cli

    return demo_cli(args)


def _add_sft_parsers(sub) -> None:
    sf = sub.add_parser("sft", help="supervised fine-tuning on agent trajectories",
                        description="Fine-tune the config's model on trajectories (the oracle's "
                        "on [tasks], or --trajectories FILE) with the RL trainer, loss on the "
                        "assistant tokens only; prints the HF checkpoint (docs: swefleet/app/sft.py).",
                        epilog="examples:\n  swefleet sft --config configs/quickstart.toml "
                        "--output-dir runs/sft\n  swefleet sft --config configs/quickstart.toml "
                        "--trajectories runs/RUN/episodes.jsonl --steps 50")
    sf.add_argument("--config", required=True, help="TOML config ([sft], [model], [tasks], ...)")
    sf.add_argument("--output-dir", default="", help="SFT directory (default runs/<name>-sft-<time>)")
    sf.add_argument("--trajectories", default="",
                    help="episodes.jsonl (swefleet) or mini-swe-agent JSON/JSONL instead of the "
                         "oracle's trajectories")
    sf.add_argument("--steps", type=int, default=0, help="optimizer steps (default: sft.steps)")
    sf.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config field, e.g. --set sft.lr=1e-3")
    sf.set_defaults(func=_sft)
    de = sub.add_parser("demo", help="SFT warm start, then RL, then eval on held-out tasks",
                        description="The stages of `make run` on one config: [sft] (skipped when "
                        "sft.steps is 0), RL from its checkpoint, then [final_eval] of the final "
                        "checkpoint; a second run on the same --output-dir skips finished stages.",
                        epilog="examples:\n  swefleet demo --config configs/quickstart.toml\n"
                        "  swefleet demo --config configs/quickstart.toml --set sft.steps=0")
    de.add_argument("--config", required=True, help="TOML config (see configs/quickstart.toml)")
    de.add_argument("--output-dir", default="", help="run directory (default runs/<name>-<time>)")
    de.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a config field, e.g. --set orchestrator.steps=3")
    de.set_defaults(func=_demo)


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
