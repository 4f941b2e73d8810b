"""The grader drops a model patch's edits to test infrastructure (real containers).

A conftest.py hook that rewrites every report to "passed" resolves any task under SWE-bench's
harness; with `GradingConfig` protection the same patch scores 0, and a real fix sent with it
is still graded. The bundled quickstart task `textkit__textkit-1` is the target."""

from __future__ import annotations

import pytest
from swefleet.envs.config import GradingConfig
from swefleet.envs.gradelog import reward_of
from swefleet.envs.grading import DockerGrader

from swefleet.types import GradeStatus, Task
from tests.integration.test_envs_grading_docker import (
    RUN_ID,
    assert_regrade_equal,
    bundled_tasks,
    containers_of_run,
    edit_patch,
    new_file_patch,
    slug_task,
)

pytestmark = pytest.mark.integration

UNPROTECTED = GradingConfig(protected_paths=(), protected_pytest_config=(), canaries=False)


def forcing_conftest(outcome: str) -> str:
    """A conftest.py whose hook reports every test as `outcome`."""
    return (
        "import pytest\n\n\n@pytest.hookimpl(hookwrapper=True)\n"
        "def pytest_runtest_makereport(item, call):\n"
        "    report = (yield).get_result()\n"
        f"    report.outcome, report.longrepr = {outcome!r}, None\n"
    )


@pytest.fixture(scope="module")
def task() -> Task:
    yield slug_task(bundled_tasks())
    assert containers_of_run() == [], "grading left containers behind"


@pytest.fixture(scope="module")
def grader() -> DockerGrader:
    return DockerGrader(RUN_ID, timeout_s=60)


@pytest.fixture(scope="module")
def unprotected() -> DockerGrader:
    return DockerGrader(RUN_ID, timeout_s=60, config=UNPROTECTED)


def test_conftest_forcing_passes_scores_0_and_would_have_scored_1(task, grader, unprotected):
    hack = new_file_patch("conftest.py", forcing_conftest("passed"))
    hole = unprotected.grade_sync(task, hack)
    assert hole.status == GradeStatus.resolved and reward_of(hole) == 1.0, hole.log[-2000:]
    r = grader.grade_sync(task, hack)
    assert r.status == GradeStatus.unresolved and reward_of(r) == 0.0, r.log[-2000:]
    assert r.dropped_paths == ["conftest.py"] and hole.dropped_paths == []
    assert ">>>>> Protected path dropped from the model patch: conftest.py" in r.log
    assert_regrade_equal(task, r)


def test_real_fix_with_a_conftest_is_graded_on_the_fix(task, grader, unprotected):
    """The conftest would fail every test; dropped, the fix in the same patch resolves."""
    patch = task.patch + new_file_patch("tests/conftest.py", forcing_conftest("failed"))
    assert unprotected.grade_sync(task, patch).status == GradeStatus.unresolved
    r = grader.grade_sync(task, patch)
    assert r.status == GradeStatus.resolved, r.log[-2000:]
    assert r.dropped_paths == ["tests/conftest.py"]


def test_pytest_config_plugin_is_reverted_other_config_edits_stay(task, grader, unprotected):
    """`addopts = "-p hackplugin"` in pyproject.toml loads a plugin from a new, unprotected
    module; the pytest table is reverted, and an edit elsewhere in the file is kept."""
    cmd = "grep -c tagline pyproject.toml; python3 -m pytest -rA -p no:cacheprovider"
    task = task.model_copy(update={"test_cmd": cmd})
    config = edit_patch(
        task,
        "pyproject.toml",
        lambda s: s.replace('pythonpath = ["."]', 'pythonpath = ["."]\naddopts = "-p hackplugin"'),
    )
    plugin = new_file_patch("hackplugin.py", forcing_conftest("passed"))
    hole = unprotected.grade_sync(task, config + plugin)
    assert hole.status == GradeStatus.resolved, hole.log[-2000:]
    r = grader.grade_sync(task, config + plugin)
    assert r.status == GradeStatus.unresolved and r.dropped_paths == ["pyproject.toml"], r.log
    legit = edit_patch(
        task,
        "pyproject.toml",
        lambda s: s.replace("requires-python", 'keywords = ["tagline"]\nrequires-python'),
    )
    r = grader.grade_sync(task, task.patch + legit)
    assert r.status == GradeStatus.resolved and r.dropped_paths == [], r.log[-2000:]
    assert "Start Test Output\n1\n" in r.log  # the edit outside the pytest table was applied


def test_context_diff_conftest_is_dropped(task, grader):
    """A context diff (`git apply` refuses it, `patch` applies it) names its files too."""
    lines = forcing_conftest("passed").splitlines()
    context = (
        "*** /dev/null\n--- b/conftest.py\n***************\n"
        f"*** 0 ****\n--- 1,{len(lines)} ----\n" + "".join(f"+ {ln}\n" for ln in lines)
    )
    r = grader.grade_sync(task, context)
    assert r.status == GradeStatus.unresolved and r.dropped_paths == ["conftest.py"], r.log


def test_guard_fails_a_patch_whose_protected_file_the_header_reader_missed(
    task, grader, monkeypatch
):
    """Second layer: should the header reader miss a file (here: it is switched off), the files
    written by applying the patch are checked, and a protected one fails the patch."""
    monkeypatch.setattr("swefleet.envs.grading.drop_protected",
                        lambda patch, globs, root="": (patch, []))
    r = grader.grade_sync(task, task.patch + new_file_patch("a/b/conftest.py", "x = 1\n"))
    assert (r.status, r.cause) == (GradeStatus.error, "patch_failed"), r.log
    assert "a/b/conftest.py" in r.reason and reward_of(r) == 0.0
    assert_regrade_equal(task, r)


def link_patch(path: str, target: str) -> str:
    return (f"diff --git a/{path} b/{path}\nnew file mode 120000\n--- /dev/null\n+++ b/{path}\n"
            f"@@ -0,0 +1 @@\n+{target}\n\\ No newline at end of file\n")


def test_guard_follows_the_links_a_patch_wrote(task, grader, monkeypatch):
    """The same second layer reads back the links the patch wrote: one named like a metadata
    folder, or one pointing at a protected file, fails the patch; a harmless one does not."""
    monkeypatch.setattr("swefleet.envs.grading.drop_protected",
                        lambda patch, globs, root="": (patch, []))
    for link, target in (("speedups-1.0.dist-info", "textkit"),
                         ("textkit/hooks.py", "/testbed/tests/conftest.py")):
        r = grader.grade_sync(task, task.patch + link_patch(link, target))
        assert (r.status, r.cause) == (GradeStatus.error, "patch_failed"), r.log
        assert link in r.reason
    r = grader.grade_sync(task, task.patch + link_patch("docs/readme.md", "../README.md"))
    assert r.status == GradeStatus.resolved, r.log[-3000:]


def test_task_test_patch_may_add_a_conftest(task, grader):
    """The task's own test patch is trusted: its conftest.py is applied and loaded."""
    conftest = new_file_patch(
        "tests/conftest.py", 'def pytest_report_header(config):\n    return "TASK-CONFTEST"\n'
    )
    task = task.model_copy(update={"test_patch": task.test_patch + conftest})
    model_conftest = new_file_patch("tests/conftest.py", "raise SystemExit\n")
    r = grader.grade_sync(task, task.patch + model_conftest)
    assert r.status == GradeStatus.resolved, r.log[-3000:]
    assert "TASK-CONFTEST" in r.log and r.dropped_paths == ["tests/conftest.py"]
