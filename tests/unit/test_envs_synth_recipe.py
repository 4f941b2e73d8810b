"""Recipes: the shipped ones load; file selection and errors that name the field."""

from __future__ import annotations

from pathlib import Path

import pytest
from swefleet.envs.synth.build import repo_dockerfile, task_dockerfile
from swefleet.envs.synth.mutators import find_mutations
from swefleet.envs.synth.recipe import RECIPES_DIR, Recipe, RecipeError, load_recipe
from swefleet.envs.synth.trace import span_lines

pytestmark = pytest.mark.unit


def make(**fields) -> Recipe:
    base = {"package": "pkg", "version": "1.0", "sha256": "0" * 64, "repo": "o/pkg",
            "mutate": ["pkg/*.py"], "exclude": ["pkg/tests/*"], "tests": ["pkg/tests"]}
    return Recipe.model_validate({**base, **fields})


def test_shipped_recipes_load_with_both_splits():
    recipes = [load_recipe(p) for p in sorted(RECIPES_DIR.glob("*.toml"))]
    assert len(recipes) >= 6
    assert {r.split for r in recipes} == {"train", "heldout"}
    assert len({r.package for r in recipes}) == len(recipes)
    assert all(len(r.sha256) == 64 and r.version for r in recipes)


def test_mutable_and_test_files():
    r = make(deselect=["pkg/tests/test_slow.py"])
    files = ["pkg/core.py", "pkg/tests/test_core.py", "pkg/tests/test_slow.py",
             "pkg/tests/helpers.py", "pkg/tests/util_test.py", "setup.py"]
    assert [f for f in files if r.is_mutable(f)] == ["pkg/core.py"]
    assert r.test_files(files) == ["pkg/tests/test_core.py", "pkg/tests/util_test.py"]


def test_tests_for_uses_the_map_then_the_module_name_then_everything():
    r = make(test_map={"pkg/odd.py": ["pkg/tests/test_x.py"]})
    tests = ["pkg/tests/test_core.py", "pkg/tests/test_other.py"]
    assert r.tests_for("pkg/odd.py", tests) == ["pkg/tests/test_x.py"]
    assert r.tests_for("pkg/_core.py", tests) == ["pkg/tests/test_core.py"]
    assert r.tests_for("pkg/__init__.py", tests) == tests  # "pkg" names no test file
    assert r.instance_prefix == "o__pkg-1.0"


def test_errors_name_the_file_and_field(tmp_path: Path):
    bad = tmp_path / "bad.toml"
    bad.write_text('package = "x"\nversion = "1"\nsha256 = "a"\nrepo = "o/x"\ntests = ["t"]\n'
                   'mutate = ["x.py"]\nsplit = "test"\n')
    with pytest.raises(RecipeError, match=r"bad.toml: field 'split'"):
        load_recipe(bad)
    bad.write_text('package = "x"\nunknown = 1\n')
    with pytest.raises(RecipeError, match="bad.toml: field"):
        load_recipe(bad)
    with pytest.raises(RecipeError, match="no such recipe"):
        load_recipe(tmp_path / "missing.toml")


def test_images_put_the_import_path_first_and_keep_one_commit():
    docker = repo_dockerfile(make(import_path="src"), "base:1", "/testbed")
    assert "ENV PYTHONPATH=/testbed/src" in docker and "git commit -qm base" in docker
    assert "ENV PYTHONPATH=/testbed\n" in repo_dockerfile(make(), "base:1", "/testbed")
    task = task_dockerfile("repo:1", "/testbed", has_test_patch=True)
    assert "git apply -R /tmp/swefleet/gold.patch" in task
    assert "git apply -R /tmp/swefleet/test.patch" in task
    assert "rm -rf /tmp/swefleet .git" in task  # history of the clean state is dropped


def test_coverage_lines_of_an_else_removal_are_the_else_body():
    src = "def f(x):\n    if x:\n        y = 1\n    else:\n        y = 2\n    return y\n"
    (m,) = [m for m in find_mutations(src, "m.py") if m.kind == "removed_branch" and m.new == ""]
    assert list(span_lines(m, src)) == [4, 5]


def test_task_files_accept_a_recipe_instead_of_an_image(tmp_path: Path):
    import json

    from swefleet.envs.synth.build import recipe_path_of
    from swefleet.envs.tasks import TaskFileError, load_tasks, recipe_of

    record = {"instance_id": "o__pkg-1.0.off_by_one__0", "repo": "o/pkg",
              "problem_statement": "p", "recipe": "recipes/pkg.toml"}
    tasks_file = tmp_path / "tasks.jsonl"
    tasks_file.write_text(json.dumps(record) + "\n")
    (task,) = load_tasks(tasks_file)
    assert recipe_of(task) == "recipes/pkg.toml" and not task.image
    with pytest.raises(FileNotFoundError, match="recipes/pkg.toml"):
        recipe_path_of(task, tasks_file)
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "pkg.toml").write_text("")
    assert recipe_path_of(task, tasks_file) == tmp_path / "recipes" / "pkg.toml"
    del record["recipe"]
    tasks_file.write_text(json.dumps(record) + "\n")
    with pytest.raises(TaskFileError, match="neither 'image' nor 'source_dir'"):
        load_tasks(tasks_file)


def test_skip_functions_match_qualified_names():
    r = make(skip_functions=["RRCache.*", "rr_cache"])
    assert r.skips("RRCache.__delitem__") and r.skips("rr_cache")
    assert not r.skips("LRUCache.popitem") and not r.skips("rr_cache_helper")


def test_kinds_default_to_the_one_token_kinds_and_unknown_ones_are_refused(tmp_path: Path):
    from swefleet.envs.synth.mutators import EXTRA_KINDS, KINDS

    assert make().kinds == list(KINDS)
    assert make(kinds=[*KINDS, *EXTRA_KINDS]).kinds[-1] == "swapped_statements"
    bad = tmp_path / "bad.toml"
    bad.write_text('package = "x"\nversion = "1"\nsha256 = "a"\nrepo = "o/x"\ntests = ["t"]\n'
                   'mutate = ["x.py"]\nkinds = ["off_by_one", "typo"]\n')
    with pytest.raises(RecipeError, match=r"bad.toml: field 'kinds'.*unknown bug kinds \['typo'\]"):
        load_recipe(bad)


def test_heldout_share_holds_out_instances_of_a_train_package_by_their_id():
    from swefleet.envs.tasks import is_evaluation_split

    ids = [f"o__pkg-1.0.off_by_one__{i:08x}" for i in range(2000)]
    splits = [make(heldout_share=0.3).split_of(i) for i in ids]
    assert set(splits) == {"train", "heldout_instance"}
    assert 0.26 < splits.count("heldout_instance") / len(ids) < 0.34
    assert splits == [make(heldout_share=0.3).split_of(i) for i in ids]  # a task keeps its split
    assert {make().split_of(i) for i in ids} == {"train"}
    assert {make(split="heldout", heldout_share=0.3).split_of(i) for i in ids} == {"heldout"}
    assert is_evaluation_split("heldout_instance") and not is_evaluation_split("train")
    with pytest.raises(ValueError):
        make(heldout_share=1.0)
