"""`swefleet tasks generate`: tasks from one recipe, validated, merged into a task file.

    swefleet tasks generate --recipe envs/recipes/toolz.toml --n 12 \\
        --out envs/data/pypi/tasks.jsonl

Steps (see `envs/synth/__init__.py`): repo image, baseline (k runs), one traced run (lines the
tests execute), candidate bugs on executed lines screened in seeded order (at most
`max_per_function` per function) until enough break tests, then per bug: hidden tests, issue
text, task image, lists from k buggy + k gold runs, and a checked reproduction in the issue
(`envs.synth.repro`). The tasks of this package (same
instance-id prefix) in `--out` are replaced; other records are kept. With `--extend` they are
kept too and `n` new ones are added: bugs already in the file and functions they already cover
are skipped, so a set grows without regenerating (or re-validating) what it holds.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict
from swefleet.envs.images import DEFAULT_BASE_IMAGE
from swefleet.envs.synth.candidates import Package, bug_patch, record_of, to_task
from swefleet.envs.synth.derive import derive_lists
from swefleet.envs.synth.mutators import Mutation, choose, find_mutations
from swefleet.envs.synth.probe import Baseline, run_baseline, screen
from swefleet.envs.synth.recipe import load_recipe
from swefleet.envs.synth.trace import is_covered, traced_lines

from swefleet.rundir import write_text_atomic
from swefleet.types import Task

log = logging.getLogger(__name__)


class GenerateConfig(BaseModel):
    """Knobs of one generation run."""

    model_config = ConfigDict(extra="forbid")

    n: int = 12
    """Tasks to write for the package (fewer when not enough bugs survive)."""
    seed: int = 0
    """Orders the candidate bugs; the same seed and recipe give the same tasks."""
    k: int = 2
    """Runs of each state (clean baseline, buggy, gold); tests that disagree are dropped."""
    concurrency: int = 2
    """Test runs at a time."""
    max_candidates: int = 0
    """Candidate bugs to try at most (0: 12 per task asked for)."""
    max_per_function: int = 1
    """Tasks per function at most (variety)."""
    base_image: str = DEFAULT_BASE_IMAGE
    """Image the repo images are built on."""
    extend: bool = False
    """Keep this package's tasks already in the output file and add `n` new ones."""


def existing_tasks(out_file: Path, prefix: str) -> list[dict]:
    """The records of the package `prefix` already in `out_file` (none when it is absent)."""
    if not out_file.exists():
        return []
    records = [json.loads(line) for line in out_file.read_text().splitlines() if line.strip()]
    return [r for r in records if r["instance_id"].startswith(prefix + ".")]


def covered_functions(records: list[dict]) -> Counter[tuple[str, str]]:
    """(file, function) -> tasks of `records` that planted their bug there."""
    return Counter((r["synth"]["file"], r["synth"]["function"])
                   for r in records if isinstance(r.get("synth"), dict) and "file" in r["synth"])


def load_package(recipe_path: Path) -> Package:
    from swefleet.envs.synth.fetch import fetch_sdist, read_sdist

    recipe = load_recipe(recipe_path)
    files = read_sdist(fetch_sdist(recipe))
    texts = {}
    for path, data in files.items():
        if path.endswith(".py"):
            try:
                texts[path] = data.decode()
            except UnicodeDecodeError:
                continue
    return Package(recipe, recipe_path, texts, recipe.test_files(sorted(files)))


def ordered_candidates(package: Package, seed: int) -> Iterator[Mutation]:
    found: list[Mutation] = []
    for path in package.mutable():
        found += [m for m in find_mutations(package.texts[path], path)
                  if m.kind in package.recipe.kinds and not package.recipe.skips(m.function)]
    log.info("%s: %d candidate bugs in %d files", package.recipe.package, len(found),
             len(package.mutable()))
    return choose(found, seed)


async def _screen_until(package: Package, image: str, baseline: Baseline, grader,
                        cfg: GenerateConfig, want: int, lines: dict[str, set[int]],
                        out_file: Path, kept: list[dict]) -> tuple[list[Task], int, int]:
    """Screen candidates on lines the tests run (`lines`), in batches, until `want` bugs are
    turned into tasks (images built, lists still empty); returns them, the number of bugs
    found and of candidates tried. Bugs of `kept` (records to keep) and the functions they
    cover are skipped."""
    budget = cfg.max_candidates or 12 * cfg.n
    per_function = covered_functions(kept)
    known = {r["instance_id"].rsplit("__", 1)[-1] for r in kept}
    found: list[Task] = []
    tried = bugs = 0
    pending = (m for m in ordered_candidates(package, cfg.seed) if m.id not in known)
    while len(found) < want and tried < budget:
        batch: list[tuple[Mutation, str, list[str]]] = []
        for m in pending:
            if per_function[(m.path, m.function)] >= cfg.max_per_function:
                continue
            source = package.texts[m.path]
            if not is_covered(m, source, lines) or not m.is_valid(source):
                continue
            files = package.recipe.tests_for(m.path, package.test_files)
            batch.append((m, bug_patch(package, m), files))
            if len(batch) >= min(2 * cfg.concurrency, budget - tried):
                break
        if not batch:
            break
        tried += len(batch)
        # accepted in candidate order, so the result does not depend on the batch size
        for s in await screen(package.recipe, image, batch, baseline, grader, cfg.concurrency):
            key = (s.mutation.path, s.mutation.function) if s else None
            if s is None or len(found) >= want or per_function[key] >= cfg.max_per_function:
                continue
            bugs += 1
            task = to_task(package, s, out_file, cfg.seed, cfg.base_image)
            if task is not None:
                per_function[key] += 1
                found.append(task)
        log.info("%s: %d tasks from %d bugs, %d candidates tried", package.recipe.package,
                 len(found), bugs, tried)
    return found, bugs, tried


async def generate_tasks(recipe_path: Path, out_file: Path, cfg: GenerateConfig) -> dict:
    """Generate, validate and return (tasks, report) for one recipe; writes nothing."""
    from swefleet.envs.config import FarmConfig
    from swefleet.envs.grading import DockerGrader
    from swefleet.envs.reaper import remove_run_containers
    from swefleet.envs.synth.behaviour_run import record_all, with_probes
    from swefleet.envs.synth.build import ensure_repo_image
    from swefleet.envs.synth.repro_check import find_reproductions, with_found

    started = time.monotonic()
    package = load_package(recipe_path)
    recipe = package.recipe
    kept_records = existing_tasks(out_file, recipe.instance_prefix) if cfg.extend else []
    image = ensure_repo_image(recipe, cfg.base_image)
    run_id = f"synth-{uuid.uuid4().hex[:8]}"
    grader = DockerGrader(run_id, timeout_s=recipe.timeout_s, max_parallel=cfg.concurrency)
    try:
        baseline = await run_baseline(recipe, image, package.test_files, grader, cfg.k)
        log.info("%s: %d stable passing tests of %d", recipe.package, len(baseline.passing),
                 len(baseline.seen))
        lines = await asyncio.to_thread(traced_lines, image, "/testbed", package.mutable(),
                                        package.test_files, run_id)
        want = cfg.n + max(1, cfg.n // 4)  # spares for bugs that fail the later checks
        screener = DockerGrader(run_id, timeout_s=baseline.screening_timeout(recipe.timeout_s),
                                max_parallel=cfg.concurrency)
        try:
            tasks, bugs, tried = await _screen_until(package, image, baseline, screener, cfg,
                                                     want, lines, out_file, kept_records)
        finally:
            screener.close()
        derived = await derive_lists(tasks, grader, cfg.k, cfg.concurrency)
        kept = [d.task for d in derived if d.ok][: cfg.n]
        found = await find_reproductions(kept, FarmConfig(), cfg.concurrency)
        kept = [with_found(t, f) for t, f in zip(kept, found, strict=True)]
        recorded = await record_all(kept, FarmConfig(), cfg.concurrency)
        kept = [with_probes(t, r) for t, r in zip(kept, recorded, strict=True)]
    finally:
        grader.close()
        remove_run_containers(run_id)
    dropped = {d.task.instance_id: d.reason for d in derived if not d.ok}
    report = {
        "recipe": str(recipe_path), "package": recipe.package, "version": recipe.version,
        "split": recipe.split, "baseline_passing": len(baseline.passing),
        "kept": len(kept_records),
        "candidates_tried": tried, "bugs_found": bugs, "tasks": len(kept),
        "dropped": dropped, "flaky_tests_dropped": sum(d.flaky for d in derived),
        "reproduced": sum(bool(f.script) for f in found),
        "probed": sum(bool(getattr(t, "probes", None)) for t in kept),
        "kinds": dict(Counter(t.model_extra["bug_kind"] for t in kept)),
        "splits": dict(Counter(t.split for t in kept)),
        "seconds": round(time.monotonic() - started, 1),
    }
    return {"tasks": kept, "report": report}


def merge_into(out_file: Path, prefix: str, tasks: list[Task], extend: bool = False) -> int:
    """Replace the records whose instance id starts with `prefix` by `tasks` (or, with
    `extend`, add `tasks` to them); atomic."""
    records = []
    if out_file.exists():
        records = [json.loads(line) for line in out_file.read_text().splitlines() if line.strip()]
    if not extend:
        records = [r for r in records if not r["instance_id"].startswith(prefix + ".")]
    records += [record_of(t) for t in tasks]
    records.sort(key=lambda r: (r.get("split", ""), r["instance_id"]))
    out_file.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(out_file, "".join(json.dumps(r) + "\n" for r in records))
    return len(records)
