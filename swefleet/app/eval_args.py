"""Arguments of `swefleet eval`'s SWE-bench harness conventions and of `swefleet export`
(argparse only: `swefleet --help` stays light)."""

from __future__ import annotations

import argparse


def add_eval_harness_args(ev: argparse.ArgumentParser) -> None:
    """Selection, parallelism, timeout, run id and trajectory export (docs/eval.md)."""
    ev.add_argument("--instance-ids", nargs="+", default=[], metavar="ID",
                    help="only these instances")
    ev.add_argument("--filter", default="", metavar="REGEX",
                    help="only instances whose id matches REGEX (re.match, as mini-swe-agent)")
    ev.add_argument("--slice", default="", metavar="START:STOP",
                    help="a slice of the selected instances, e.g. 0:10")
    ev.add_argument("--max-workers", type=_positive_int, default=None,
                    help="instances run at a time (episodes and sandboxes)")
    ev.add_argument("--timeout", type=_positive_float, default=None, metavar="S",
                    help="seconds per episode and per grading run (default 3600 / 300)")
    ev.add_argument("--run-id", default="",
                    help="names logs/run_evaluation/<run_id>/ (default: the output dir's name)")
    ev.add_argument("--export-trajectories", default="", choices=["mini-swe-agent"],
                    help="also write the trajectories in this format (as swefleet export)")


def add_export_parser(sub, handler) -> None:
    ex = sub.add_parser("export", help="an eval's trajectories in another harness's format")
    ex.add_argument("format", choices=["mini-swe-agent"],
                    help="mini-swe-agent: <id>/<id>.traj.json (mini-swe-agent-1.1) + preds.json")
    ex.add_argument("dir", help="eval output dir (swefleet eval --output-dir)")
    ex.add_argument("--out", default="", help="destination (default DIR/mini-swe-agent)")
    ex.add_argument("--tokenizer", default="",
                    help="the model's tokenizer dir, to decode replies (default: the eval's --model)")
    ex.set_defaults(func=handler)


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value
