"""From a screened bug to a task record: hide its tests, write its issue, build its image."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

from swefleet.envs.data.make_quickstart import unified_diff
from swefleet.envs.synth.build import task_image_for
from swefleet.envs.synth.hide import hide_tests
from swefleet.envs.synth.mutators import Mutation
from swefleet.envs.synth.probe import Screened
from swefleet.envs.synth.recipe import Recipe
from swefleet.envs.synth.statement import NoEvidence, write_statement

from swefleet.types import Task

log = logging.getLogger(__name__)


@dataclass
class Package:
    """The text files of one unpacked sdist, sorted into what the pipeline needs."""

    recipe: Recipe
    recipe_path: Path
    texts: dict[str, str]
    """Every `.py` file of the sdist (path relative to its root -> text)."""
    test_files: list[str]
    """Runnable test files (`Recipe.test_files`)."""

    @property
    def test_sources(self) -> dict[str, str]:
        """Python files under the recipe's test paths (test files plus their helpers)."""
        return {p: t for p, t in self.texts.items() if self._in_tests(p)}

    @property
    def sources(self) -> dict[str, str]:
        """The package's own Python files (not tests)."""
        return {p: t for p, t in self.texts.items() if not self._in_tests(p)}

    def _in_tests(self, path: str) -> bool:
        return path in self.test_files or any(
            path == t or path.startswith(t.rstrip("/") + "/") for t in self.recipe.tests)

    def mutable(self) -> list[str]:
        """Source files bugs may go into (clean text: ends in a newline, no CR)."""
        return sorted(p for p, t in self.sources.items()
                      if self.recipe.is_mutable(p) and t.endswith("\n") and "\r" not in t)


def bug_patch(package: Package, mutation: Mutation) -> str:
    """The bug as a diff from the clean file (its reverse is the gold patch)."""
    original = package.texts[mutation.path]
    return unified_diff(mutation.path, original, mutation.apply(original))


def to_task(package: Package, screened: Screened, out_file: Path, seed: int,
            base_image: str) -> Task | None:
    """The task of a screened bug, its image built; None when its tests cannot be hidden or
    the log holds no failure report to write the issue from."""
    recipe, m = package.recipe, screened.mutation
    hidden = hide_tests(package.test_sources, screened.broken)
    if hidden is None:
        log.info("%s: skipped: its broken tests cannot be located to hide them", m.id)
        return None
    _, test_patch = hidden
    original = package.texts[m.path]
    buggy = m.apply(original)
    try:
        statement = write_statement(recipe, m, screened.log, screened.broken,
                                    {**package.sources, m.path: buggy})
    except NoEvidence:
        log.info("%s: skipped: no failure report to write the issue from", m.id)
        return None
    patch = unified_diff(m.path, buggy, original)
    image = task_image_for(recipe, patch, test_patch, base_image)
    instance_id = f"{recipe.instance_prefix}.{m.kind}__{m.id}"
    return Task(
        instance_id=instance_id,
        repo=recipe.repo,
        problem_statement=statement,
        patch=patch,
        test_patch=test_patch,
        version=recipe.version,
        image=image,
        test_cmd=recipe.test_cmd,
        test_files=screened.test_files,
        log_parser="pytest",
        split=recipe.split_of(instance_id),
        recipe=os.path.relpath(package.recipe_path.resolve(), out_file.parent.resolve()),
        bug_kind=m.kind,
        synth={"file": m.path, "function": m.function, "seed": seed},
    )


def record_of(task: Task) -> dict:
    """The JSONL record of a generated task: without `image` (it is rebuilt from `recipe`)."""
    record = task.model_dump(exclude={"image", "source_dir"})
    return record
