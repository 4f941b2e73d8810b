"""Handlers of `swefleet tasks generate` and `swefleet tasks validate` (imported lazily)."""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shutil
import tempfile
import time
import uuid
from pathlib import Path

log = logging.getLogger(__name__)


def generate_cli(args: argparse.Namespace) -> int:
    from swefleet.envs.images import build_base_image
    from swefleet.envs.synth.generate import GenerateConfig, generate_tasks, merge_into
    from swefleet.envs.synth.recipe import load_recipe

    for recipe_path in args.recipe:  # before any image work
        if not Path(recipe_path).is_file():
            raise ValueError(f"--recipe {recipe_path}: no such file")
    cfg = GenerateConfig(n=args.n, seed=args.seed, k=args.k, concurrency=args.max_workers,
                         max_candidates=args.max_candidates, base_image=args.base_image,
                         extend=args.extend)
    build_base_image(cfg.base_image)
    out = Path(args.tasks)
    reports = []
    failed = []
    for recipe_path in args.recipe:
        try:
            result = asyncio.run(generate_tasks(Path(recipe_path), out, cfg))
        except Exception as e:  # one package's failure does not stop the others
            log.exception("%s: generation failed", recipe_path)
            failed.append(f"{recipe_path}: {type(e).__name__}: {e}")
            continue
        prefix = load_recipe(recipe_path).instance_prefix
        total = merge_into(out, prefix, result["tasks"], extend=cfg.extend)
        report = result["report"]
        reports.append(report)
        print(f"{report['package']} {report['version']} ({report['split']}): "
              f"{report['tasks']} {'new ' if cfg.extend else ''}tasks from {report['bugs_found']} bugs, "
              f"{report['candidates_tried']} candidates tried, {report['seconds']}s; "
              f"kinds {report['kinds']}; {out} now holds {total} tasks", flush=True)
        if report["dropped"]:
            print(f"  dropped: {json.dumps(report['dropped'])}")
    if args.json:
        Path(args.json).write_text(json.dumps(reports, indent=2) + "\n")
    for line in failed:
        print(f"FAILED {line}")
    return 0 if not failed and all(r["tasks"] > 0 for r in reports) else 1


def validate_cli(args: argparse.Namespace) -> int:
    from swefleet.app.config import load_config
    from swefleet.envs.backends import make_grader
    from swefleet.envs.images import build_base_image
    from swefleet.envs.reaper import remove_run_containers
    from swefleet.envs.synth.validate import summary, validate_tasks
    from swefleet.envs.tasks import load_tasks, prepare_task_images
    from swefleet.evals.select import select_by_flags

    started = time.monotonic()
    cfg = load_config(args.config, args.set)  # bad input: exit 2, before any image
    source = task_file_arg(args)
    tasks = select_by_flags(load_tasks(source, split=args.split), args)
    if not tasks:
        raise ValueError(f"--tasks {source}: no task selected (split={args.split})")
    build_base_image(args.base_image)
    prepare_task_images(tasks, source, args.base_image)
    run_id = f"validate-{uuid.uuid4().hex[:8]}"
    grader = make_grader(run_id, cfg.envs, timeout_s=args.timeout)
    try:
        rows = asyncio.run(validate_tasks(tasks, grader, args.k, args.max_workers))
    finally:
        grader.close()
        remove_run_containers(run_id)
    for r in rows:
        print(f"{'OK  ' if r.ok else 'FAIL'} {r.instance_id:70} {r.split:8} "
              f"gold={','.join(r.gold)} empty={','.join(r.empty)}"
              + ("" if r.ok else f"  {'; '.join(r.reasons)}"))
    result = summary(rows, args.k) | {"seconds": round(time.monotonic() - started, 1)}
    print(json.dumps({k: v for k, v in result.items() if k != "invalid"}))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0 if result["valid"] == result["tasks"] else 1


def _prepared_tasks(args: argparse.Namespace) -> tuple[Path, list]:
    """The task file and its selected tasks (`--instance-ids`, `--filter`, `--slice`, `--per-split`), with the
    base image and the task images built."""
    from swefleet.envs.images import build_base_image
    from swefleet.envs.tasks import load_tasks, prepare_task_images
    from swefleet.evals.select import select_by_flags

    path = Path(args.tasks)
    tasks = select_by_flags(load_tasks(path), args)
    if not tasks:
        raise ValueError(f"--tasks {path}: no task selected")
    build_base_image(args.base_image)
    prepare_task_images(tasks, path, args.base_image)
    return path, tasks


def _update_task_file(path: Path, update) -> int:
    """Rewrite the JSONL task file with `update(records)` applied in place (nothing is written
    when it raises); returns what `update` returned."""
    from swefleet.rundir import write_text_atomic

    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    out = update(records)
    write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in records))
    return out


def _saving_each(path: Path, update_records, line) -> tuple[list[int], object]:
    """An `on_done` that writes that one task's result into the task file at once
    (`update_records(records, [found])`), then prints `line(found)`, so a run stopped half-way
    keeps every task it printed; and the list its changed-record counts go to."""
    changed: list[int] = []

    def save(found) -> None:
        changed.append(_update_task_file(path, lambda records: update_records(records, [found])))
        print(line(found), flush=True)

    return changed, save


def reproduce_cli(args: argparse.Namespace) -> int:
    from swefleet.envs.config import FarmConfig
    from swefleet.envs.synth.repro_check import find_reproductions, update_records

    started = time.monotonic()
    path, tasks = _prepared_tasks(args)
    changed, save = _saving_each(path, update_records, lambda f: (
        f"{'OK  ' if f.script else 'NONE'} {f.instance_id:70} "
        f"{len(f.script.splitlines()) if f.script else f.reason}"))
    found = asyncio.run(find_reproductions(tasks, FarmConfig(), args.max_workers, save))
    infra = sum(f.reason.startswith("infra") for f in found)
    print(json.dumps({"tasks": len(found), "reproduced": sum(bool(f.script) for f in found),
                      "infra_errors": infra, "records_changed": sum(changed),
                      "seconds": round(time.monotonic() - started, 1)}))
    return 1 if infra else 0


def probes_cli(args: argparse.Namespace) -> int:
    from swefleet.envs.config import FarmConfig
    from swefleet.envs.synth.behaviour_run import record_all, update_records

    started = time.monotonic()
    path, tasks = _prepared_tasks(args)
    changed, save = _saving_each(path, update_records, lambda f: (
        f"{len(f.probes):3} of {len(f.deciding):3} {f.instance_id:70} {f.reason}"))
    found = asyncio.run(record_all(tasks, FarmConfig(), args.max_workers, save))
    infra = sum(f.reason.startswith("infra") for f in found)
    print(json.dumps({"tasks": len(found), "with_probes": sum(bool(f.probes) for f in found),
                      "deciding_functions": sum(len(f.deciding) for f in found),
                      "probed_functions": sum(len(f.probes) for f in found),
                      "infra_errors": infra, "records_changed": sum(changed),
                      "seconds": round(time.monotonic() - started, 1)}))
    return 1 if infra else 0


def stats_cli(args: argparse.Namespace) -> int:
    from swefleet.envs.task_stats import markdown_table, package_rows, summary
    from swefleet.envs.tasks import load_tasks

    tasks = load_tasks(Path(args.tasks), split=args.split)
    if not tasks:
        raise ValueError(f"--tasks {args.tasks}: no task (split={args.split})")
    print(markdown_table(package_rows(tasks)))
    print(json.dumps(summary(tasks)))
    return 0


def difficulty_cli(args: argparse.Namespace) -> int:
    from swefleet.envs.difficulty import pass_rates, record_difficulty

    path, report_path = Path(args.tasks), Path(args.eval) / "report.json"
    if not report_path.is_file():
        raise ValueError(f"--eval {args.eval}: no report.json (not a finished eval's folder)")
    if path.suffix != ".jsonl" or not path.is_file():
        raise ValueError(f"--tasks {path}: not a JSONL task file")
    rates = pass_rates(json.loads(report_path.read_text()))

    def record(records: list[dict]) -> int:
        written = record_difficulty(records, rates, args.key)
        if not written:
            raise ValueError(f"--eval {args.eval}: none of its {len(rates)} tasks is in {path}")
        return written

    written = _update_task_file(path, record)
    values = [rate for rate, _ in rates.values()]
    print(json.dumps({"key": args.key, "tasks_recorded": written,
                      "always_solved": sum(v >= 1.0 for v in values),
                      "never_solved": sum(v <= 0.0 for v in values),
                      "in_between": sum(0.0 < v < 1.0 for v in values)}))
    return 0


def task_file_arg(args: argparse.Namespace) -> str:
    """`--tasks FILE` (or the old positional FILE), checked to name a task file or Hub set."""
    from swefleet.app.eval_args import check_task_source

    if args.tasks and args.legacy_tasks and args.tasks != args.legacy_tasks:
        raise ValueError(f"two task files: --tasks {args.tasks} and {args.legacy_tasks}")
    source = args.tasks or args.legacy_tasks
    if not source:
        raise ValueError("--tasks FILE is required (the task file to validate)")
    check_task_source(source)
    return source


def combine_cli(args: argparse.Namespace) -> int:
    """`swefleet tasks combine`: pairs of a package's tasks as two-bug tasks, each validated
    (gold resolves k times, empty does not, neither part's fix alone resolves); the valid ones
    are appended to the task file."""
    from swefleet.envs.backends import make_grader
    from swefleet.envs.config import FarmConfig
    from swefleet.envs.images import build_base_image
    from swefleet.envs.reaper import remove_run_containers
    from swefleet.envs.synth.combine import combine, half_fixes, pick_pairs
    from swefleet.envs.synth.validate import validate_tasks
    from swefleet.envs.tasks import load_tasks, prepare_task_images

    started = time.monotonic()
    path = Path(args.tasks)
    records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    known = {r["instance_id"] for r in records}
    candidates = [c for c in (combine(a, b) for a, b in pick_pairs(records, args.per_package,
                                                                    args.seed))
                  if c["instance_id"] not in known]
    if not candidates:
        raise ValueError(f"--tasks {path}: no new pair of tasks can be combined")
    folder = Path(tempfile.mkdtemp(prefix="swefleet-combine-"))  # never in the repository
    scratch = folder / "tasks.jsonl"
    scratch.write_text("".join(json.dumps({**c, "recipe": str((path.parent / c["recipe"]).resolve())}) + "\n"
                               for c in candidates))
    run_id = f"combine-{uuid.uuid4().hex[:8]}"
    try:
        tasks = load_tasks(scratch)
        build_base_image(args.base_image)
        prepare_task_images(tasks, scratch, args.base_image)
        grader = make_grader(run_id, FarmConfig())
        try:
            rows = asyncio.run(validate_tasks(tasks, grader, args.k, args.max_workers))
            halves = asyncio.run(half_fixes(tasks, grader, args.max_workers))
        finally:
            grader.close()
            remove_run_containers(run_id)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    kept = [c for c, r in zip(candidates, rows, strict=True)
            if r.ok and "resolved" not in halves[r.instance_id]]
    for c, r in zip(candidates, rows, strict=True):
        ok = c in kept
        print(f"{'OK  ' if ok else 'FAIL'} {r.instance_id:70} {r.split:8} gold={','.join(r.gold)} "
              f"empty={','.join(r.empty)} halves={','.join(halves[r.instance_id])}")
    with path.open("a") as out:
        out.write("".join(json.dumps(c) + "\n" for c in kept))
    print(json.dumps({"candidates": len(candidates), "kept": len(kept), "k": args.k,
                      "seconds": round(time.monotonic() - started, 1)}))
    return 0
