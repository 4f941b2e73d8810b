"""The bundled generated task set (envs/data/pypi/tasks.jsonl): its shape and its promises.

Its Docker validation (oracle 100 %, empty 0 %) is a documented command (docs/tasks.md); the
integration tests run it on a subset."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from swefleet.envs.gradelog import patch_paths
from swefleet.envs.synth.build import recipe_path_of
from swefleet.envs.synth.recipe import load_recipe
from swefleet.envs.tasks import load_tasks

pytestmark = pytest.mark.unit
BUNDLED = Path(__file__).resolve().parents[2] / "envs" / "data" / "pypi" / "tasks.jsonl"


@pytest.fixture(scope="module")
def tasks():
    return load_tasks(BUNDLED)


def test_size_packages_and_split_by_package(tasks):
    assert len(tasks) >= 60
    per_repo = Counter(t.repo for t in tasks)
    assert len(per_repo) >= 6
    splits = {repo: frozenset(t.split for t in tasks if t.repo == repo) for repo in per_repo}
    # a package is held out whole, or trained on with some of its bugs held out by instance
    for repo, split in splits.items():
        assert split == {"heldout"} or "train" in split <= {"train", "heldout_instance"}, repo
    assert sum(s == {"heldout"} for s in splits.values()) >= 3  # held out by repository
    assert sum("heldout_instance" in s for s in splits.values()) >= 3  # and by instance


def test_every_task_comes_from_its_recipe(tasks):
    by_id = {t.instance_id: t for t in tasks}
    for t in tasks:
        recipe = load_recipe(recipe_path_of(t, BUNDLED))
        assert t.instance_id.startswith(recipe.instance_prefix + ".")
        parts = [by_id[i] for i in t.model_extra["synth"].get("parts", [])]
        # a two-bug task (`tasks combine`) has the split of its two parts
        split = parts[0].split if parts else recipe.split_of(t.instance_id)
        assert (t.repo, t.version, t.split, t.test_cmd) == (
            recipe.repo, recipe.version, split, recipe.test_cmd)
        assert all(p.split == t.split for p in parts)
        assert not t.image and not t.source_dir  # images are built from the recipe
        paths = patch_paths(t.patch)
        assert len(paths) == (2 if parts else 1) and all(map(recipe.is_mutable, paths))
        assert t.model_extra["bug_kind"] in t.instance_id


def test_lists_and_patches(tasks):
    for t in tasks:
        assert t.FAIL_TO_PASS and t.PASS_TO_PASS
        assert not set(t.FAIL_TO_PASS) & set(t.PASS_TO_PASS)
        changed = [line for line in t.patch.splitlines()
                   if line[:1] in "+-" and line[:3] not in ("+++", "---")]
        assert 1 <= len(changed) <= 20, t.instance_id  # a small fix
        assert t.test_patch.startswith("diff --git")
        for test_id in t.FAIL_TO_PASS + t.PASS_TO_PASS:
            assert test_id.count("[") == test_id.count("]") and "::" in test_id


def test_problem_statements_hide_tests_and_fix_locations(tasks):
    for t in tasks:
        text = t.problem_statement
        names = {part.split("[")[0] for tid in t.FAIL_TO_PASS for part in tid.split("::")[1:]}
        for name in names:
            assert not re.search(rf"\b{re.escape(name)}\b", text), (t.instance_id, name)
        assert ".py:" not in text and not re.search(r"\bline \d+", text), t.instance_id
        hunk_lines = re.findall(r"^@@ -(\d+)", t.patch, re.MULTILINE)
        assert not any(f":{n}" in text for n in hunk_lines), t.instance_id
