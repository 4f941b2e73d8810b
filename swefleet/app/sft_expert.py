"""Expert demonstrations for `swefleet sft` (`[sft] demonstrations = "expert"`), and a command
that records them alone.

The scripted expert (`agents/expert.py`) works each train task through `[agent]`'s scaffold in
a real sandbox; the grader keeps the resolved episodes (`agents/expert_run.py`). They go to
`expert_episodes.jsonl` (read back when the stage runs again) with `expert_demonstrations.json`
beside it (kept / dropped by reason, mean turns and tokens, wall time) and, when some were
dropped after an episode ran, `expert_dropped_episodes.jsonl` (never trained on).

    python -m swefleet.app.sft_expert --tasks envs/data/pypi/tasks.jsonl --split train \\
        --output-dir out/expert [--scaffold tools] [--tokenizer DIR] [--concurrency 2] \\
        [--first-guess-fraction 0.5]

records the demonstrations of a task file without training (the tokenizer: `--tokenizer`, else
the cached Qwen2.5-Coder-1.5B-Instruct folder when present, else the project's tiny one).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from swefleet.rundir import write_json_atomic

if TYPE_CHECKING:
    from swefleet.app.config import RunConfig

log = logging.getLogger(__name__)

SUMMARY_FILE = "expert_demonstrations.json"
DROPPED_FILE = "expert_dropped_episodes.jsonl"
QWEN_TOKENIZER = Path("~/.cache/swefleet/models/qwen2.5-coder-1.5b-instruct").expanduser()


def check_train_only(tasks: list) -> None:
    """Expert demonstrations come from train tasks only: any other split is refused."""
    other = [t for t in tasks if t.split != "train"]
    if other:
        splits = ", ".join(sorted({t.split for t in other}))
        raise ValueError(
            f"{len(other)} of the {len(tasks)} tasks are of split {splits}: expert "
            "demonstrations are made from train tasks only; set tasks.split = \"train\"")


def expert_episodes(cfg: RunConfig, path: Path, tokenizer) -> list:
    """The kept expert trajectories of `cfg`'s train tasks, recorded in `path` (read back when
    there) with `SUMMARY_FILE` beside it."""
    from swefleet.agents.export import read_trajectories

    if path.exists():
        return read_trajectories(path)
    from swefleet.app.rl import prepare_tasks

    tasks = prepare_tasks(cfg)
    check_train_only(tasks)
    demos, wall = asyncio.run(_record(cfg, tasks, tokenizer))
    return write_demonstrations(demos, path, wall)


def write_demonstrations(demos: list, path: Path, wall_s: float) -> list:
    """Write the kept trajectories to `path` (atomically) and the summary beside it; returns
    the kept trajectories. None kept is an error (nothing to train on)."""
    from swefleet.agents.expert_run import summary
    from swefleet.agents.export import append_trajectories

    info = summary(demos, wall_s)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json_atomic(path.parent / SUMMARY_FILE, info)
    log.info("expert demonstrations: %d of %d kept; dropped %s", info["kept"], info["tasks"],
             info["reasons"] or "none")
    kept = [d.trajectory for d in demos if d.kept]
    dropped = [d.trajectory for d in demos if not d.kept and d.trajectory is not None]
    dropped_path = path.with_name(DROPPED_FILE)
    dropped_path.unlink(missing_ok=True)
    if dropped:  # for a look at what went wrong; never trained on
        append_trajectories(dropped, dropped_path)
    if not kept:
        raise ValueError(f"no expert demonstration was resolved ({info['reasons']}): "
                         f"see {path.parent / SUMMARY_FILE}")
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    append_trajectories(kept, tmp)
    tmp.replace(path)
    return kept


async def _record(cfg: RunConfig, tasks: list, tokenizer) -> tuple[list, float]:
    from swefleet.agents.expert_run import expert_demonstrations
    from swefleet.app.stage_bar import StageBar
    from swefleet.envs.backends import make_farm, make_grader

    run_id = f"{cfg.name}-expert-{uuid.uuid4().hex[:8]}"
    farm = make_farm(run_id, cfg.envs)
    grader = make_grader(run_id, cfg.envs)
    bar = StageBar("expert demonstrations", len(tasks))
    start = time.monotonic()
    try:
        await farm.start()
        demos = await expert_demonstrations(tasks, farm, grader, tokenizer, cfg.agent,
                                            cfg.sft.oracle_concurrency,
                                            on_done=lambda d: bar.advance(),
                                            first_guess_fraction=cfg.sft.first_guess_fraction)
        return demos, time.monotonic() - start
    finally:
        bar.close()
        grader.close()
        await farm.close()


def _tokenizer(path: str, scratch: Path):
    from swefleet.agents.tokenizer import Tokenizer

    if path:
        return Tokenizer.from_dir(path), path
    for folder in (QWEN_TOKENIZER, QWEN_TOKENIZER / "hf"):
        if (folder / "tokenizer.json").is_file():
            return Tokenizer.from_dir(folder), str(folder)
    from swefleet.tinymodel import PRESETS, train_tokenizer

    scratch.mkdir(parents=True, exist_ok=True)
    train_tokenizer(scratch, vocab_size=PRESETS["tiny"]["vocab_size"])
    return Tokenizer.from_dir(scratch), "the project's tiny tokenizer"


def main(argv: list[str] | None = None) -> int:
    from swefleet.app.config import RunConfig, load_config

    p = argparse.ArgumentParser(prog="python -m swefleet.app.sft_expert",
                                description="Record expert demonstrations of a task file.")
    p.add_argument("--tasks", required=True)
    p.add_argument("--split", default="train")
    p.add_argument("--output-dir", required=True)
    p.add_argument("--config", help="a run config whose [agent] and [envs] to use")
    p.add_argument("--scaffold", choices=["tools", "bash"], default=None)
    p.add_argument("--tokenizer", default="", help="a folder with tokenizer.json")
    p.add_argument("--concurrency", type=int, default=2)
    p.add_argument("--instance-ids", nargs="*", default=None)
    p.add_argument("--first-guess-fraction", type=float, default=None,
                   help="share of demonstrations that try a wrong edit first ([sft])")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: "
                                                   "%(message)s", datefmt="%H:%M:%S")
    cfg = load_config(args.config, []) if args.config else RunConfig(name="expert")
    cfg.tasks.path, cfg.tasks.split = args.tasks, args.split
    cfg.agent.scaffold = args.scaffold or (cfg.agent.scaffold if args.config else "tools")
    cfg.sft.oracle_concurrency = args.concurrency
    if args.first_guess_fraction is not None:
        cfg.sft.first_guess_fraction = args.first_guess_fraction
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer, about = _tokenizer(args.tokenizer, out / "tokenizer")
    from swefleet.app.rl import prepare_tasks

    wanted = set(args.instance_ids or [])
    tasks = prepare_tasks(cfg, (lambda ts: [t for t in ts if t.instance_id in wanted])
                          if wanted else None)
    check_train_only(tasks)
    demos, wall = asyncio.run(_record(cfg, tasks, tokenizer))
    path = out / "expert_episodes.jsonl"
    path.unlink(missing_ok=True)
    try:
        write_demonstrations(demos, path, wall)
    finally:
        info = json.loads((out / SUMMARY_FILE).read_text())
        info["tokenizer"], info["scaffold"] = about, cfg.agent.scaffold
        write_json_atomic(out / SUMMARY_FILE, info)
        print(json.dumps({k: v for k, v in info.items() if k != "per_task"}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
