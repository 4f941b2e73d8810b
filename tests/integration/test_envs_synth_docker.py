"""Task synthesis end to end on one small real package (inflection from PyPI), in Docker:
generate 2 tasks (bug kinds beyond one token, half the package held out by instance), check
their images (the fix is nowhere in git), validate them, and run the oracle / empty evals on a
subset of the bundled set through the user's command."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "envs" / "recipes" / "inflection.toml"
BUNDLED = REPO / "envs" / "data" / "pypi" / "tasks.jsonl"


@pytest.fixture(scope="module")
def ready():
    from swefleet.envs.images import DEFAULT_BASE_IMAGE, image_exists
    from swefleet.envs.synth.fetch import FetchError, fetch_sdist
    from swefleet.envs.synth.recipe import load_recipe

    if not image_exists(DEFAULT_BASE_IMAGE):
        pytest.skip(f"base image {DEFAULT_BASE_IMAGE} missing: run `make base-image`")
    try:
        fetch_sdist(load_recipe(RECIPE))  # cached after the first download
    except FetchError as e:
        pytest.skip(f"the inflection sdist is not cached and PyPI is unreachable: {e}")


def swefleet(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "swefleet", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return proc


def in_image(image: str, script: str, stdin: str = "") -> str:
    return subprocess.run(["docker", "run", "--rm", "-i", "--network", "none", image, "bash",
                           "-c", script], input=stdin, capture_output=True, text=True,
                          check=True).stdout


EXTRA_KINDS = ["wrong_call", "wrong_default", "removed_statement", "swapped_statements"]


@pytest.fixture(scope="module")
def generated(ready, tmp_path_factory) -> Path:
    """Two tasks of the bundled recipe with the kinds beyond one token and half the package
    held out by instance."""
    folder = tmp_path_factory.mktemp("synth")
    recipe = folder / "inflection.toml"
    text = re.sub(r"^(kinds = \[[^]]*\]|heldout_share = .*)\n", "", RECIPE.read_text(),
                  flags=re.MULTILINE)
    recipe.write_text(text + f"kinds = {EXTRA_KINDS}\nheldout_share = 0.5\n")
    out = folder / "tasks.jsonl"
    swefleet("tasks", "generate", "--recipe", str(recipe), "--n", "2", "-k", "1",
             "--max-candidates", "12", "--out", str(out))
    return out


def test_generated_tasks_are_well_formed(generated):
    from swefleet.envs.synth.recipe import load_recipe
    from swefleet.envs.tasks import load_tasks

    tasks = load_tasks(generated)
    assert len(tasks) == 2
    recipe = load_recipe(generated.parent / "inflection.toml")
    for t in tasks:
        assert t.model_extra["bug_kind"] in EXTRA_KINDS
        assert t.split == recipe.split_of(t.instance_id) in ("train", "heldout_instance")
        assert t.instance_id.startswith("jpvanhal__inflection-0.5.1.")
        assert t.FAIL_TO_PASS and t.PASS_TO_PASS and not set(t.FAIL_TO_PASS) & set(t.PASS_TO_PASS)
        assert t.patch.startswith("diff --git a/inflection/__init__.py")
        assert t.test_patch.startswith("diff --git a/test_inflection.py")
        assert not t.image and t.model_extra["recipe"] == "inflection.toml"
        for probe in (t.model_extra.get("probes") or {}).values():  # recorded by generate
            assert probe["calls"] and all("gold" in c for c in probe["calls"])
        for test_id in t.FAIL_TO_PASS:  # no deciding test is named in the issue
            assert test_id.split("::")[-1].split("[")[0] not in t.problem_statement


def test_task_image_holds_only_the_buggy_state(generated):
    from swefleet.envs.tasks import load_tasks, prepare_task_images

    task = prepare_task_images(load_tasks(generated)[:1], generated)[0]
    hidden = task.FAIL_TO_PASS[0].split("::")[-1].split("[")[0]
    out = in_image(task.image, "git rev-list --all --count; git status --porcelain | wc -l; "
                   "git fsck --unreachable --no-reflogs 2>/dev/null | wc -l; "
                   f"grep -c 'def {hidden}(' test_inflection.py || true")
    # one commit, equal to the working tree, nothing unreachable: no fix anywhere in git
    assert out.split() == ["1", "0", "0", "0"]
    check = ("cat > /tmp/gold.patch; git apply --check /tmp/gold.patch && echo gold-applies; "
             "git apply --check -R /tmp/gold.patch 2>/dev/null || echo not-fixed")
    assert in_image(task.image, check, stdin=task.patch).split() == ["gold-applies", "not-fixed"]


def test_validate_command_accepts_the_generated_tasks(generated):
    proc = swefleet("tasks", "validate", str(generated), "-k", "1")
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert (summary["tasks"], summary["valid"]) == (2, 2)


def test_extend_adds_a_task_in_another_function_and_keeps_the_others(generated, tmp_path):
    out = tmp_path / "tasks.jsonl"
    out.write_text(generated.read_text())
    (tmp_path / "inflection.toml").write_text((generated.parent / "inflection.toml").read_text())
    swefleet("tasks", "generate", "--extend", "--recipe", str(tmp_path / "inflection.toml"),
             "--n", "1", "-k", "1", "--max-candidates", "12", "--tasks", str(out))
    before = [json.loads(line) for line in generated.read_text().splitlines()]
    after = {r["instance_id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert len(after) == 3 and all(after[r["instance_id"]] == r for r in before)
    (new,) = [r for i, r in after.items() if i not in {b["instance_id"] for b in before}]
    assert new["synth"]["function"] not in {b["synth"]["function"] for b in before}


def test_oracle_and_empty_evals_on_a_bundled_subset(ready, tmp_path):
    records = [json.loads(line) for line in BUNDLED.read_text().splitlines()]
    subset = [r for r in records if r["instance_id"].startswith("jpvanhal__inflection")][:2]
    assert len(subset) == 2
    for r in subset:  # the copy lives elsewhere: point at the recipe absolutely
        r["recipe"] = str((BUNDLED.parent / r["recipe"]).resolve())
    tasks = tmp_path / "subset.jsonl"
    tasks.write_text("".join(json.dumps(r) + "\n" for r in subset))
    for agent, expected in (("oracle", 1.0), ("empty", 0.0)):
        out = tmp_path / agent
        swefleet("eval", "--agent", agent, "--tasks", str(tasks), "--output-dir", str(out))
        report = json.loads((out / "report.json").read_text())
        assert report["success_rate"] == expected, report
        assert report["infra_errors"] == 0
