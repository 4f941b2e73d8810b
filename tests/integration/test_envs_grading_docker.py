"""DockerGrader with real containers: every outcome, the patch fallback, limits, no leftovers.

Uses the bundled quickstart tasks (images are content-hashed and reused between runs)."""

from __future__ import annotations

import asyncio
import difflib
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest
from swefleet.envs.config import GradingConfig
from swefleet.envs.gradelog import regrade_from_log
from swefleet.envs.grading import DockerGrader, grade_many
from swefleet.envs.tasks import load_tasks, prepare_task_images, resolve_source_dir, source_patch_of

from swefleet.types import GradeCause, GradeResult, GradeStatus, Task

pytestmark = pytest.mark.integration

TASKS_FILE = Path(__file__).resolve().parents[2] / "envs/data/quickstart/tasks.jsonl"
RUN_ID = f"test-grading-{uuid.uuid4().hex[:8]}"


def containers_of_run() -> list[str]:
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=swefleet.run={RUN_ID}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.split()


def bundled_tasks() -> list[Task]:
    """The quickstart tasks with their images built (skips without Docker or base image)."""
    import docker.errors
    from swefleet.envs.images import DEFAULT_BASE_IMAGE, image_exists

    try:
        if not image_exists(DEFAULT_BASE_IMAGE):
            pytest.skip(f"base image {DEFAULT_BASE_IMAGE} not built (envs.images)")
    except docker.errors.DockerException as e:  # no daemon
        pytest.skip(f"Docker is not available: {e}")
    return prepare_task_images(load_tasks(TASKS_FILE), TASKS_FILE)


@pytest.fixture(scope="module")
def tasks() -> list[Task]:
    loaded = bundled_tasks()
    yield loaded
    assert containers_of_run() == [], "grading left containers behind"


@pytest.fixture(scope="module")
def grader() -> DockerGrader:
    return DockerGrader(RUN_ID, timeout_s=60)


@pytest.fixture(scope="module")
def graded(tasks, grader) -> tuple[list[GradeResult], list[GradeResult]]:
    """Gold and empty patches for every bundled task (the set's validation)."""
    gold = asyncio.run(grade_many(tasks, {t.instance_id: t.patch for t in tasks}, grader, 2))
    empty = asyncio.run(grade_many(tasks, {t.instance_id: "" for t in tasks}, grader, 2))
    return gold, empty


def slug_task(tasks: list[Task]) -> Task:
    return next(t for t in tasks if t.instance_id == "textkit__textkit-1")


def task_file_text(task: Task, path: str) -> str:
    """`path` as the task's image holds it: the source dir with the task's `source_patch`."""
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp) / "repo"
        shutil.copytree(resolve_source_dir(task, TASKS_FILE), repo)
        patch = source_patch_of(task, TASKS_FILE)
        if patch:
            subprocess.run(["git", "apply", "-"], input=patch, cwd=repo, check=True)
        return (repo / path).read_text()


def edit_patch(task: Task, path: str, edit) -> str:
    """A git-style diff that applies `edit(text)` to `path` of the task's repository."""
    old = task_file_text(task, path)
    new = edit(old)
    body = difflib.unified_diff(
        old.splitlines(True), new.splitlines(True), f"a/{path}", f"b/{path}"
    )
    return f"diff --git a/{path} b/{path}\n" + "".join(body)


def new_file_patch(path: str, text: str) -> str:
    lines = text.splitlines(True)
    body = "".join("+" + line for line in lines)
    return (
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1,{len(lines)} @@\n{body}"
    )


def assert_regrade_equal(task: Task, live: GradeResult) -> None:
    again = regrade_from_log(task, live.log)
    assert again.model_dump(exclude={"duration_s"}) == live.model_dump(exclude={"duration_s"})


def test_gold_resolves_and_empty_does_not_for_every_bundled_task(tasks, graded):
    gold, empty = graded
    for task, g, e in zip(tasks, gold, empty):
        assert g.status == GradeStatus.resolved, (task.instance_id, g.reason, g.log[-2000:])
        assert "(git apply)" in g.log
        assert e.status == GradeStatus.unresolved, (task.instance_id, e.reason)
        assert e.fail_to_pass["failure"] == task.FAIL_TO_PASS
        assert e.pass_to_pass["failure"] == []
    assert containers_of_run() == []


def test_regrade_from_log_equals_the_live_grade(tasks, graded):
    gold, empty = graded
    for task, g, e in zip(tasks, gold, empty):
        assert_regrade_equal(task, g)
        assert_regrade_equal(task, e)


async def test_garbage_patch_did_not_apply(tasks, grader):
    task = slug_task(tasks)
    r = await grader.grade(task, "this is not a patch\n")
    assert (r.status, r.cause, r.reason) == (GradeStatus.error, GradeCause.patch_failed, "patch did not apply")
    wrong_context = task.patch.replace("len(slug) < max_length", "len(slug) != max_length")
    r = await grader.grade(task, wrong_context)
    assert (r.status, r.cause, r.reason) == (GradeStatus.error, GradeCause.patch_failed, "patch did not apply")
    assert_regrade_equal(task, r)


def test_fuzzy_patch_falls_back_to_patch_fuzz(tasks, grader):
    task = slug_task(tasks)
    fuzzy = task.patch.replace("     if not sep:\n", "     if not separator:\n", 1)
    assert fuzzy != task.patch
    r = grader.grade_sync(task, fuzzy)
    assert r.status == GradeStatus.resolved, r.log[-3000:]
    assert "(patch --fuzz)" in r.log and "(git apply)" not in r.log


def test_hanging_suite_times_out(tasks):
    task = slug_task(tasks)
    hang = edit_patch(task, "textkit/slug.py", lambda s: s + "\nimport time\n\ntime.sleep(3600)\n")
    r = DockerGrader(RUN_ID, timeout_s=5).grade_sync(task, hang)
    assert (r.status, r.cause, r.reason) == (GradeStatus.error, GradeCause.timeout, "tests timed out")
    assert r.duration_s < 20
    assert_regrade_equal(task, r)


def test_broken_collection_is_suite_did_not_run(tasks):
    """(A model patch's conftest.py is dropped by default: test_envs_grading_protect.py.)"""
    task = slug_task(tasks)
    conftest = new_file_patch("conftest.py", 'raise RuntimeError("no tests today")\n')
    unprotected = GradingConfig(protected_paths=(), protected_pytest_config=())
    r = DockerGrader(RUN_ID, timeout_s=60, config=unprotected).grade_sync(task, task.patch + conftest)
    assert (r.status, r.cause) == (GradeStatus.error, GradeCause.no_suite), r.log
    assert r.tests == {}
    assert_regrade_equal(task, r)


def test_model_edits_to_test_files_are_reset(tasks, grader):
    """Deleting (or rewriting) the deciding test file does not help: SWE-bench resets the
    files that test_patch touches before applying it."""
    task = slug_task(tasks)
    delete = edit_patch(task, "tests/test_slug.py", lambda s: "")
    r = grader.grade_sync(task, task.patch + delete)
    assert r.status == GradeStatus.resolved, r.log[-3000:]
    r = grader.grade_sync(task, delete)
    assert r.status == GradeStatus.unresolved


def test_docker_failure_is_infra_error_not_unresolved(tasks, grader):
    task = slug_task(tasks).model_copy(update={"image": "swefleet-task:does-not-exist"})
    r = grader.grade_sync(task, task.patch)
    assert (r.status, r.cause) == (GradeStatus.error, GradeCause.infra), r.reason
    assert_regrade_equal(task, r)


def test_grading_container_is_locked_down(tasks):
    probe = (
        "id -u; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status; ls /sys/class/net; "
        "cat /sys/fs/cgroup/pids/pids.max /sys/fs/cgroup/pids.max 2>/dev/null; "
        "python3 -m pytest -rA -p no:cacheprovider"
    )
    task = slug_task(tasks).model_copy(update={"test_cmd": probe})
    r = DockerGrader(RUN_ID, timeout_s=60, pids_limit=321).grade_sync(task, task.patch)
    assert r.status == GradeStatus.resolved, r.log[-3000:]
    head = r.log.split(">>>>> Start Test Output", 1)[1].split("=====", 1)[0]
    assert head.split()[0] == "65534"  # not the repository's owner: read-only tests
    assert "CapEff:\t0000000000000000" in head and "NoNewPrivs:\t1" in head
    assert head.split("NoNewPrivs:\t1", 1)[1].split()[0:2] == ["lo", "321"]


def test_fuzz_fallback_never_writes_into_git_dir(tasks, grader):
    """`git apply` refuses `.git/` paths; `patch` would install this hook, which then ran
    during grading (at the reset of the test files, before the test patch)."""
    task = slug_task(tasks)
    hook = new_file_patch(".git/hooks/post-checkout", "#!/bin/sh\necho HOOK-RAN >&2\n")
    hook = hook.replace("new file mode 100644", "new file mode 100755")
    r = grader.grade_sync(task, task.patch + hook)
    assert (r.status, r.cause, r.reason) == (GradeStatus.error, GradeCause.patch_failed, "patch did not apply"), r.log[-3000:]
    assert "HOOK-RAN" not in r.log and "writes into .git" in r.log
    assert_regrade_equal(task, r)


def test_grading_caps_the_size_of_a_file_the_tests_write(tasks):
    probe = ("head -c 3000000 /dev/zero >/tmp/big; ls -l /tmp/big; "
             "python3 -m pytest -rA -p no:cacheprovider")
    task = slug_task(tasks).model_copy(update={"test_cmd": probe})
    r = DockerGrader(RUN_ID, timeout_s=60, max_file_mb=1).grade_sync(task, task.patch)
    assert r.status == GradeStatus.resolved, r.log[-3000:]
    assert "File size limit exceeded" in r.log and " 1048576 " in r.log
