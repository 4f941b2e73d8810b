"""Backend parity: every task of a task set graded on Docker and on bwrap, verdicts compared.

    python benchmarks/backend_parity.py --tasks envs/data/quickstart/tasks.jsonl
                                        [--slice 0:10] [--hacks a,b] [--concurrency 2]
                                        [--gold-repeats 20] [--record FILE [--fewer-than 20]]
                                        [--backend bwrap]
    python benchmarks/backend_parity.py --tasks FILE --record FILE --summary 20

For each task: the gold patch, the empty patch, and each technique of the hostile catalogue
(`tests/integration/test_grading_hostile.py`, described in docs/tasks.md). A technique that
edits package code is appended to the file the gold patch changes first (for the quickstart
tasks, the catalogue's own `textkit/__init__.py` patch); its package name is put in for
`textkit`. The cases are graded on one backend, then on the other (`envs/parity.py`).

Prints a table (one row per case, the two verdicts) and, last, one JSON object: tasks, cases,
agreements, disagreements (task, case, the fields that differ, both verdicts with reasons),
seconds per backend, and per backend the gold grades, how many resolved and how many were
graded `tampered`. Exit status 1 when any case disagrees.

Ctrl-C or SIGTERM stops a run with one line and exit 130 or 143, its sandboxes removed; it
records nothing (a campaign in chunks loses only the chunk it was in).

`--record FILE` appends, after the grading, one line per task with its gold grades per backend
(`envs/gold_record.py`); with `--fewer-than N` only the tasks the record holds fewer than N gold
grades of (on either backend, or on `--backend`) are graded, before `--slice` and `--per-split`,
so a long grading campaign runs in chunks. `--backend docker|bwrap` grades on that backend only
and compares nothing: a machine without Docker, with the set's rootfs bundle imported, grades
the bwrap half, and its record lines hold bwrap's counts only. `--summary N` grades nothing: it
prints what the record says of the task file (tasks with N or more gold grades on each backend,
and the grades in all).
"""

from __future__ import annotations

import argparse
import datetime
import difflib
import json
import subprocess
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from swefleet.envs.gold_record import (
    append_record,
    fewest_grades,
    gold_totals,
    read_record,
    record_lines,
    record_summary,
)
from swefleet.envs.gradelog import patch_paths
from swefleet.envs.parity import BACKENDS, Case, check_parity
from swefleet.envs.tasks import load_tasks, prepare_task_images
from swefleet.evals.select import spread_over_packages

from swefleet.types import Task
from tests.integration.test_envs_grading_docker import new_file_patch
from tests.integration.test_grading_hostile import HACKS, Hack

QUICKSTART_PACKAGE = "textkit"


def image_file_text(task: Task, path: str) -> str:
    """`path` of the task's repository as its image holds it (a throwaway container)."""
    out = subprocess.run(["docker", "run", "--rm", "--network", "none", "--entrypoint", "cat",
                          task.image, f"{task.workdir}/{path}"],
                         capture_output=True, text=True, check=True)
    return out.stdout


def append_patch(old: str, path: str, code: str) -> str:
    """A git-style diff appending `code` to `path` (whose text is `old`)."""
    body = difflib.unified_diff(old.splitlines(True), (old + code).splitlines(True),
                                f"a/{path}", f"b/{path}")
    return f"diff --git a/{path} b/{path}\n" + "".join(body)


def hostile_patch(hack: Hack, task: Task) -> str | None:
    """The technique's patch for `task`: the catalogue's own on the quickstart package, else
    its code appended to the gold patch's first source file, the package name and the task's
    public knowledge put in; None when the technique needs knowledge the catalogue lacks for
    the task (the function a fix changes is known for the quickstart tasks only), or builds
    several files of the quickstart package (`hostile_files.py`)."""
    if task.repo.startswith(f"{QUICKSTART_PACKAGE}/"):
        return hack.patch(task)
    if hack.build is not None:
        return None
    target = patch_paths(task.patch)[0]
    package = target.split("/")[0].removesuffix(".py")
    try:
        code = hack.code_for(task).replace(QUICKSTART_PACKAGE, package).lstrip("\n")
    except KeyError:
        return None
    if hack.tests_init or hack.new_file:
        return new_file_patch("tests/__init__.py" if hack.tests_init else hack.new_file, code)
    return append_patch(image_file_text(task, target), target, "\n" + code)


def cases_of(tasks: list[Task], hacks: list[Hack], gold_repeats: int = 1) -> list[Case]:
    cases = []
    for task in tasks:
        cases += [Case("gold", task, task.patch)] * gold_repeats + [Case("empty", task, "")]
        patches = [(h.name, hostile_patch(h, task)) for h in hacks]
        cases += [Case(name, task, patch) for name, patch in patches if patch is not None]
    return cases


def _today() -> str:
    return datetime.date.today().isoformat()


def _commit() -> str:
    """The checkout's commit (short), `+changes` when its tracked files differ from it."""
    root = Path(__file__).resolve().parents[1]
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], check=False, cwd=root,
                              capture_output=True, text=True).stdout.strip() or "unknown"
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--", ".",
                                ":!benchmarks/results"], check=False, cwd=root,
                               capture_output=True).returncode
    except FileNotFoundError:  # no git on this machine (a GPU node given a copy of the tree)
        return "unknown"
    return head + ("+changes" if dirty else "")


def parse_slice(text: str) -> slice:
    start, _, stop = text.partition(":")
    return slice(int(start) if start else None, int(stop) if stop else None)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tasks", required=True, help="a task file (jsonl)")
    p.add_argument("--slice", default=":", help="tasks START:STOP of the file (default: all)")
    p.add_argument("--hacks", default="",
                   help="comma-separated technique names (default: all; `none`: gold and empty "
                        "patches only)")
    p.add_argument("--per-split", type=int, default=0,
                   help="at most N tasks of each split, spread over its packages (after --slice)")
    p.add_argument("--concurrency", type=int, default=2, help="grades at once per backend")
    p.add_argument("--gold-repeats", type=int, default=1,
                   help="grades of each gold patch per backend (each with a fresh secret seed)")
    p.add_argument("--record", type=Path, help="a gold-grade record (jsonl) to append to")
    p.add_argument("--fewer-than", type=int, default=0,
                   help="only tasks with fewer than N gold grades per backend in --record")
    p.add_argument("--backend", choices=BACKENDS, action="append",
                   help="grade on this backend only (default: both, compared)")
    p.add_argument("--summary", type=int, default=0,
                   help="print what --record says of the tasks (N grades wanted) and stop")
    args = p.parse_args(argv)
    if (args.fewer_than or args.summary) and not args.record:
        p.error("--fewer-than and --summary need --record")
    names = [n for n in args.hacks.split(",") if n and args.hacks != "none"]
    unknown = sorted(set(names) - {h.name for h in HACKS})
    if unknown:
        p.error(f"unknown technique(s): {', '.join(unknown)}; known: "
                f"{', '.join(h.name for h in HACKS)}")
    hacks = [] if args.hacks == "none" else [h for h in HACKS if not names or h.name in names]
    tasks = load_tasks(args.tasks)
    if args.summary:
        lines = read_record(args.record)
        print(json.dumps(record_summary(tasks, lines, args.summary)))
        return 0
    backends = tuple(b for b in BACKENDS if b in (args.backend or BACKENDS))
    if args.fewer_than:
        fewest = fewest_grades(tasks, read_record(args.record), backends)
        tasks = [t for t in tasks if fewest[t.instance_id] < args.fewer_than]
    tasks = tasks[parse_slice(args.slice)]
    if args.per_split:
        tasks = spread_over_packages(tasks, args.per_split)
    commit = _commit()  # the code and tasks graded, before the run (a commit may land meanwhile)
    prepare_task_images(tasks, args.tasks)
    cases = cases_of(tasks, hacks, args.gold_repeats)
    report = check_parity(cases, f"parity-{uuid.uuid4().hex[:8]}", concurrency=args.concurrency,
                          backends=backends)
    print(report.table())
    lines = record_lines(cases, report.verdicts, _today(), commit)
    summary = {**report.summary(), "gold": gold_totals(lines, report.verdicts)}
    if args.record:
        append_record(args.record, lines)
    print(json.dumps(summary))
    return 1 if summary["disagreements"] else 0


if __name__ == "__main__":
    from swefleet.app import interrupt

    interrupt.install()  # SIGTERM as Ctrl-C: the grading unwinds, its containers go, exit 143
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(interrupt.stopped("backend_parity"))
