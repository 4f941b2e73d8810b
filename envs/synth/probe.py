"""Test runs with the real grader: the clean package (baseline) and each candidate bug.

Every run is a `DockerGrader` run (fresh locked-down container, network off) of the recipe's
test command; what is used is the per-test status map that swebench's pytest parser reads from
the log, and the log itself (for the problem statement).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, timedelta
from functools import lru_cache

from swefleet.envs.gradelog import is_infra
from swefleet.envs.grading import DockerGrader, grade_many
from swefleet.envs.synth.mutators import Mutation
from swefleet.envs.synth.recipe import Recipe
from swefleet.envs.tamper import is_cut_id

from swefleet.types import GradeResult, Task


def well_formed(test_id: str, today: date | None = None) -> bool:
    """Ids every pytest log parser reads whole and that name the same test on another day:
    SWE-bench's parser splits a result line at whitespace, so an id with a space in its
    parameters (`test_x[1 + 2]`) would reach it cut, also when the cut part holds a `]` of its
    own (`test_x[\\x1b]133;A $]` -> `test_x[\\x1b]133;A`); and an id whose parameters hold the
    day it ran (`test_to_string[case7-2026-12-04]`, a parameter made from `date.today()`) is
    gone the next day, which the grader would read as a deciding test that vanished."""
    return (test_id.count("[") == test_id.count("]") and "::" in test_id
            and not is_cut_id(test_id) and not any(c.isspace() for c in test_id)
            and not names_the_day(test_id, today or date.today()))


def names_the_day(test_id: str, today: date) -> bool:
    """Whether `test_id`'s parameters hold `today`, or the day before or after it (a run over
    midnight, a clock in another time zone), as `YYYY-MM-DD`, `YYYYMMDD` or `YYYY/MM/DD`."""
    params = test_id.partition("[")[2]
    return bool(params) and any(day in params for day in _day_strings(today))


@lru_cache(maxsize=4)
def _day_strings(today: date) -> tuple[str, ...]:
    days = [today + timedelta(days=d) for d in (-1, 0, 1)]
    return tuple(day.strftime(f) for day in days for f in ("%Y-%m-%d", "%Y%m%d", "%Y/%m/%d"))


def in_files(test_id: str, test_files: list[str]) -> bool:
    """Whether a test id belongs to one of `test_files` (files or directories)."""
    path = test_id.split("::")[0]
    return any(path == f or path.startswith(f.rstrip("/") + "/") for f in test_files)


def probe_task(recipe: Recipe, image: str, test_files: list[str], name: str) -> Task:
    return Task(
        instance_id=f"{recipe.instance_prefix}.{name}", repo=recipe.repo, problem_statement="",
        image=image, test_cmd=recipe.test_cmd, test_files=test_files, version=recipe.version,
    )


@dataclass
class Baseline:
    """Clean-package results of k runs of all test files."""

    passing: set[str]
    """Tests that passed in every run (flaky and failing ones are never used)."""
    seen: set[str]
    """Every test id any run reported."""
    seconds: float = 0.0
    """Duration of the slowest run (grading included)."""

    def screening_timeout(self, limit: float) -> float:
        """Deadline of a candidate's run: a bug that makes the suite 10x slower (or hang) is
        not worth waiting for; at least 60 s, at most `limit`."""
        return min(limit, max(60.0, 10 * self.seconds))


async def run_baseline(
    recipe: Recipe, image: str, test_files: list[str], grader: DockerGrader, k: int
) -> Baseline:
    task = probe_task(recipe, image, test_files, "baseline")
    results = await grade_many([task] * k, {task.instance_id: ""}, grader, concurrency=k)
    for r in results:
        if is_infra(r) or not r.tests:
            raise RuntimeError(f"{recipe.package}: the clean test suite did not run: {r.reason}")
    passing = set.intersection(*({t for t, s in r.tests.items() if s == "PASSED"} for r in results))
    seen = set().union(*(r.tests for r in results))
    return Baseline({t for t in passing if well_formed(t)}, seen,
                    max(r.duration_s for r in results))


@dataclass
class Screened:
    """A candidate that breaks tests, with the evidence for its problem statement."""

    mutation: Mutation
    patch: str
    """The bug as a diff (original -> mutated)."""
    test_files: list[str]
    broken: list[str]
    """Baseline-passing tests that fail with the bug."""
    log: str


def judge(
    result: GradeResult, baseline: Baseline, test_files: list[str], max_failing: int
) -> list[str] | None:
    """The broken tests of a candidate run, or None when it is not a usable bug: the run
    failed, some test of these files vanished (collection broke), or nothing (or too much)
    broke."""
    if is_infra(result) or not result.tests:
        return None
    expected = {t for t in baseline.seen if in_files(t, test_files)}
    if expected - set(result.tests):
        return None
    broken = sorted(t for t in expected & baseline.passing if result.tests.get(t) != "PASSED")
    return broken if 1 <= len(broken) <= max_failing else None


async def screen(
    recipe: Recipe,
    image: str,
    candidates: list[tuple[Mutation, str, list[str]]],
    baseline: Baseline,
    grader: DockerGrader,
    concurrency: int,
) -> list[Screened | None]:
    """Run each (mutation, bug patch, test files) on the clean image; in order."""
    tasks = [probe_task(recipe, image, files, f"probe-{m.id}") for m, _, files in candidates]
    patches = {t.instance_id: patch for t, (_, patch, _) in zip(tasks, candidates)}
    results = await grade_many(tasks, patches, grader, concurrency=concurrency)
    out: list[Screened | None] = []
    for (mutation, patch, files), result in zip(candidates, results):
        broken = judge(result, baseline, files, recipe.max_failing)
        out.append(Screened(mutation, patch, files, broken, result.log) if broken else None)
    return out
