"""`swefleet show RUN --episode ID`: one recorded episode of an RL, SFT or eval run folder as a
readable transcript (`swefleet.app.transcript`); `swefleet show RUN` lists the run's episodes.

    swefleet show runs/RUN                         # episode ids, tasks, statuses, rewards
    swefleet show runs/RUN --episode ID            # the transcript
    swefleet show out/eval --episode ID --max-lines 0

Token episodes are decoded with the run's own tokenizer
(`swefleet.evals.run_episodes.tokenizer_dir`) or `--tokenizer DIR`.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def add_show_parser(sub, handler) -> None:
    sh = sub.add_parser("show", help="an episode of a run as a readable transcript (or the "
                        "run's episode ids)")
    sh.add_argument("run_dir", metavar="RUN_DIR", help="an rl, sft or eval output dir")
    sh.add_argument("--episode", default="", metavar="ID",
                    help="the episode's episode_id (without it: list the run's episodes)")
    sh.add_argument("--max-lines", type=_lines, default=20, metavar="N",
                    help="lines kept of each reply, action, observation, log and patch: its "
                         "first and last ones (0: all)")
    sh.add_argument("--tokenizer", default="", metavar="DIR",
                    help="the model's tokenizer dir, to decode replies (default: the run's model)")
    sh.set_defaults(func=handler)


def _lines(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def show_cli(args: argparse.Namespace) -> int:
    from swefleet.evals.run_episodes import check_run_folder

    root = Path(args.run_dir)
    check_run_folder(root)
    if args.tokenizer and not (Path(args.tokenizer) / "tokenizer.json").is_file():
        raise ValueError(f"--tokenizer {args.tokenizer}: no tokenizer.json there")
    if not args.episode:
        return _list(root)
    return _show(root, args)


def _show(root: Path, args: argparse.Namespace) -> int:
    from swefleet.agents.chat_record import ChatTrajectory
    from swefleet.app.transcript import transcript
    from swefleet.evals.run_episodes import find_episode, tokenizer_dir

    found = find_episode(root, args.episode)
    traj = found.trajectory
    decode, where = None, _where(root, found)
    if traj.turns and not isinstance(traj, ChatTrajectory):
        tok = Path(args.tokenizer) if args.tokenizer else tokenizer_dir(root, found)
        if tok is not None:
            decode = _decoder(tok)
            where += f"; replies decoded with {tok}"
    lines = transcript(traj, decode, args.max_lines, where)
    if (logs := _harness_logs(root, found)) is not None:
        lines.append(f"SWE-bench logs: {logs}")
    print("\n".join(lines))
    return 0


def _list(root: Path) -> int:
    from swefleet.evals.run_episodes import episode_files, recorded

    rows = [(r.record.get("episode_id", "?"), r.record.get("task_id", "?"),
             "" if r.attempt is None else str(r.attempt), r.record.get("status", "?"),
             "-" if r.record.get("reward") is None else f"{r.record['reward']:g}",
             str(len(r.record["turns"]))) for r in recorded(root)]
    if not rows:
        raise ValueError(f"{root}: no recorded episodes (trajectories/, episodes.jsonl or "
                         "oracle_episodes.jsonl)")
    head = ("episode", "task", "attempt", "status", "reward", "turns")
    keep = [i for i in range(len(head)) if i != 2 or any(r[2] for r in rows)]
    widths = [max(len(r[i]) for r in [head, *rows]) for i in keep]
    for row in [head, *rows]:
        print("  ".join(row[i].ljust(w) for i, w in zip(keep, widths, strict=True)).rstrip())
    print(f"{len(rows)} episodes; one as a transcript: swefleet show {root} --episode ID")
    stages = sorted(str(p.parent) for p in root.glob("*/config.json") if episode_files(p.parent))
    if stages:
        print(f"the other stages' episodes (swefleet demo): swefleet show {' | '.join(stages)}")
    return 0


def _where(root: Path, found) -> str:
    where = str(found.source.relative_to(root)) if found.source.is_relative_to(root) else ""
    return where + (f", attempt {found.attempt}" if found.attempt is not None else "")


def _decoder(tokenizer: Path):
    from swefleet.agents.chat import ChatML
    from swefleet.agents.tokenizer import Tokenizer

    return ChatML(Tokenizer.from_dir(tokenizer)).completion_text


def _harness_logs(root: Path, found) -> Path | None:
    """An eval episode's per-instance SWE-bench log folder, when it is there."""
    from swefleet.evals.harness_logs import instance_log_dir
    from swefleet.evals.run_episodes import eval_meta

    meta = eval_meta(root)
    if meta is None or found.attempt is None:
        return None
    path = instance_log_dir(root, meta.get("run_id", ""), meta.get("model_name_or_path", ""),
                            found.record.get("task_id", ""), found.attempt)
    return path if path.is_dir() else None

