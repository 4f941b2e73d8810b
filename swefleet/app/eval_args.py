"""Arguments of `swefleet eval` (SWE-bench harness conventions) and of `swefleet export`: the
parsers, and the checks that run before any image, server or folder work. Argparse and paths
only: `swefleet --help` stays light."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from swefleet.app import flags

TASK_FILE_SUFFIXES = (".jsonl", ".json", ".parquet")
_HUB_NAME = re.compile(r"[\w.-]+/[\w.-]+")


def add_eval_parser(sub, handler) -> argparse.ArgumentParser:
    ev = sub.add_parser("eval", help="evaluate an agent/checkpoint on a task set")
    add_eval_args(ev)
    ev.set_defaults(func=handler)
    return ev


def add_eval_args(ev: argparse.ArgumentParser) -> None:
    ev.add_argument("--tasks", required=True,
                    help="task file (JSONL/JSON/Parquet; SWE-bench exports too: docs/tasks.md)")
    ev.add_argument("--split", default=None,
                    help="only this split, or a comma-separated list (heldout,heldout_instance)")
    ev.add_argument("--agent", default="model",
                    choices=["model", "oracle", "empty", "predictions"],
                    help="oracle applies the gold patch, empty submits nothing, predictions grades "
                         "the patches of --predictions, model runs the agent")
    ev.add_argument("--predictions", default="",
                    help="SWE-bench predictions file (JSONL/JSON) for --agent predictions")
    ev.add_argument("--model", default="",
                    help="HF checkpoint dir served by the embedded engine (with --server: the "
                         "model's tokenizer dir; with --api chat: the model NAME to request)")
    flags.add_server(ev)
    ev.add_argument("--api", default="tokens", choices=["tokens", "chat"],
                    help="tokens: token ids to /v1/completions (local tokenizer, token-exact); "
                         "chat: messages to --server's /v1/chat/completions (any "
                         "OpenAI-compatible chat endpoint, its own chat template)")
    flags.add_config(ev, help="TOML config for agent/envs/inference sections")
    flags.add_set(ev, "envs.max_concurrent=16")
    ev.add_argument("-k", type=flags.positive_int, default=1, help="attempts per task")
    flags.add_output_dir(ev, "writes report.json here", required=True)
    add_eval_harness_args(ev)


def add_eval_harness_args(ev: argparse.ArgumentParser) -> None:
    """Selection, parallelism, timeout, run id and trajectory export (docs/eval.md)."""
    flags.add_selection(ev)
    flags.add_max_workers(ev, "instances run at a time (episodes and sandboxes)")
    ev.add_argument("--timeout", type=flags.positive_float, default=None, metavar="S",
                    help="seconds per episode and per grading run (default 3600 / 300)")
    ev.add_argument("--run-id", default="",
                    help="names logs/run_evaluation/<run_id>/ (default: the output dir's name)")
    ev.add_argument("--export-trajectories", default="", choices=["mini-swe-agent"],
                    help="also write the trajectories in this format (as swefleet export)")
    add_restart(ev)


def add_restart(parser: argparse.ArgumentParser) -> None:
    """`--restart`: a folder holding another run (or this one) is moved aside, not resumed."""
    parser.add_argument("--restart", action="store_true",
                        help="start over: an output dir that holds a run is first renamed to "
                             "DIR.replaced-<time> (nothing is deleted); without it, only the "
                             "same run resumes there (docs/eval.md)")


def parse_eval_args(argv: list[str]) -> argparse.Namespace:
    """`swefleet eval`'s arguments from `argv` (the words after `eval`), checked."""
    parser = flags.Parser(prog="swefleet eval")
    add_eval_args(parser)
    args = parser.parse_args(argv)
    check_eval_args(args)
    return args


def check_eval_args(args: argparse.Namespace) -> None:
    """ValueError (one line) for arguments the eval would fail on later: the config and its
    `--set`s, the agent's model or predictions, the task file."""
    from swefleet.app.config import load_config

    cfg = load_config(args.config, args.set, servers=args.server)
    if args.agent == "model" and args.api == "chat":
        _check_chat(args, cfg.inference.api_key_env)
    elif args.agent == "model":  # running servers (--server, kind external) need its tokenizer
        _check_model(args.model, served=cfg.inference.resolved_kind == "external")
    if args.agent == "predictions":
        if not args.predictions:
            raise ValueError("--agent predictions needs --predictions FILE (SWE-bench JSONL/JSON)")
        if not Path(args.predictions).is_file():
            raise ValueError(f"--predictions {args.predictions}: no such file")
    check_task_source(args.tasks)


def _check_chat(args: argparse.Namespace, api_key_env: str) -> None:
    """`--api chat`: one `--server`, and the API key's variable set when one is named."""
    from swefleet.evals.chat_endpoint import api_key_from_env

    if len(args.server) != 1:
        raise ValueError("--api chat needs exactly one --server URL (the chat endpoint)")
    api_key_from_env(api_key_env)


def _check_model(model: str, served: bool) -> None:
    if not model:
        raise ValueError("--agent model needs --model DIR (the checkpoint; with --server, its "
                         "tokenizer dir)")
    needs = "tokenizer.json" if served else "config.json"
    if not (Path(model) / needs).is_file():
        what = "has no " + needs if Path(model).is_dir() else "does not exist"
        kind = "a tokenizer dir" if served else "an HF checkpoint"
        raise ValueError(f"--model {model} {what} (not {kind})")


def check_task_source(source: str, flag: str = "--tasks") -> None:
    """ValueError unless `source` is a file or looks like a Hub dataset name (`owner/name`)."""
    path = Path(source)
    if path.is_file() or (not path.exists() and path.suffix not in TASK_FILE_SUFFIXES
                          and _HUB_NAME.fullmatch(source)):
        return
    what = "is a directory" if path.is_dir() else "no such task file, and not a Hub dataset name"
    raise ValueError(f"{flag} {source}: {what}")


def add_export_parser(sub, handler) -> None:
    ex = sub.add_parser("export", help="a run's trajectories (eval, rl, sft) in another "
                        "harness's format")
    ex.add_argument("format", choices=["mini-swe-agent"],
                    help="mini-swe-agent: <id>/<id>.traj.json (mini-swe-agent-1.1) + preds.json")
    ex.add_argument("dir", help="an eval, rl or sft output dir (an rl run: attempt a of a task is "
                    "its a-th episode)")
    flags.add_output_dir(ex, "destination (default DIR/mini-swe-agent)", old=("--out",))
    ex.add_argument("--tokenizer", default="",
                    help="the model's tokenizer dir, to decode replies (default: the eval's "
                         "--model, the run's model)")
    ex.set_defaults(func=handler)
