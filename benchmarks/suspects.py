"""Fault localisation of the `trace` tool: where the buggy function ranks among the suspects,
against the call tree's order, on the tasks whose issue carries a reproduction script.

    python benchmarks/suspects.py --tasks envs/data/pypi/tasks.jsonl [--split train]
                                  [--limit 40] [--concurrency 2]

For each task (a fixed shuffle of the split's tasks with a reproduction, the first `--limit`):
a fresh sandbox, the reproduction saved where the agent finds it, and the real `trace` command
run with the test files the expert runs (`agents.expert.test_files`). The buggy function is the
task's `synth.function` in `synth.file`. Its rank is read from the suspects list (up to
`suspects.SHOWN`) and from the call tree (first-called first, the order an agent reads it in).
Prints one line per task and, last, one JSON object: tasks, per ordering the share ranked
first, within 3 and within 5, and the seconds a trace took (median, max).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import sys
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from swefleet.agents.config import AgentConfig
from swefleet.agents.expert import parse_hunks, test_files
from swefleet.agents.loop import attached_task
from swefleet.agents.scaffolds.suspects import parse_suspects
from swefleet.agents.scaffolds.tools import trace_command
from swefleet.envs.backends import make_farm
from swefleet.envs.config import FarmConfig
from swefleet.envs.synth.repro import SCRIPT_PATH
from swefleet.envs.tasks import load_tasks, prepare_task_images

from swefleet.types import Task

_TREE = re.compile(r"^\s*(\S+)  \((\S+):\d+\)", re.MULTILINE)


def ranks(output: str, task: Task) -> dict:
    """The buggy function's 1-based rank in the suspects and in the call tree (None: absent)."""
    synth = task.synth or {}
    target = (synth.get("function", ""), synth.get("file", ""))
    tree_part, _, suspects_part = output.partition("--- suspects:")
    tree = list(dict.fromkeys(_TREE.findall(tree_part.split("--- calls into", 1)[-1])))
    suspects = [(name, path) for name, path, _ in parse_suspects(suspects_part)]
    return {"suspects": suspects.index(target) + 1 if target in suspects else None,
            "tree": tree.index(target) + 1 if target in tree else None}


async def one(farm, task: Task, agent: AgentConfig) -> dict:
    _, script = attached_task(task, agent)
    async with farm.acquire(task) as sandbox:
        await sandbox.write_file(SCRIPT_PATH, script.encode())
        listed = await sandbox.run("git ls-files", timeout_s=60)
        tests = test_files(task, parse_hunks(task.patch)[0].path, listed.output.splitlines())
        t0 = time.monotonic()
        result = await sandbox.run(trace_command(SCRIPT_PATH, " ".join(tests)), timeout_s=120)
        seconds = time.monotonic() - t0
    return {"task": task.instance_id, **ranks(result.output, task), "seconds": round(seconds, 2),
            "no_suspects": "(none:" in result.output.partition("--- suspects:")[2]}


def share(values: list, within: int) -> float:
    return round(sum(1 for v in values if v is not None and v <= within) / len(values), 3)


async def main_async(args) -> dict:
    tasks = [t for t in load_tasks(args.tasks, args.split)
             if t.reproduction and (t.synth or {}).get("function")]
    random.Random(0).shuffle(tasks)
    tasks = prepare_task_images(tasks[:args.limit], args.tasks)
    agent = AgentConfig(scaffold="tools")
    farm = make_farm(f"suspects-{uuid.uuid4().hex[:6]}", FarmConfig())
    await farm.start()
    limit, rows = asyncio.Semaphore(args.concurrency), []

    async def run(task: Task) -> None:
        async with limit:
            row = await one(farm, task, agent)
        rows.append(row)
        print(json.dumps(row), flush=True)

    try:
        await asyncio.gather(*(run(t) for t in tasks))
    finally:
        await farm.close()
    out = {"tasks": len(rows), "split": args.split,
           "no_suspects": sum(r["no_suspects"] for r in rows)}
    for order in ("suspects", "tree"):
        values = [r[order] for r in rows]
        out[order] = {"first": share(values, 1), "top3": share(values, 3),
                      "top5": share(values, 5)}
    seconds = [r["seconds"] for r in rows]
    out["trace_s"] = {"median": round(statistics.median(seconds), 2), "max": max(seconds)}
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tasks", required=True)
    p.add_argument("--split", default="train")
    p.add_argument("--limit", type=int, default=40)
    p.add_argument("--concurrency", type=int, default=2)
    args = p.parse_args(argv)
    print(json.dumps(asyncio.run(main_async(args))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
