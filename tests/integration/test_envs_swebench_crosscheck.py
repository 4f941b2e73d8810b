"""swefleet's grading decision equals swebench's own report on the same grading log.

Every bundled quickstart task and a sample of the bundled pypi set (the first task of every
second package: 5 tasks; `SWEFLEET_CROSSCHECK_ALL=1` takes all 70) is graded in Docker with its
gold patch and with an empty patch; each log is then read by
`swebench.harness.grading.get_eval_report` (its `get_logs_eval` + `get_resolution_status`) with a
TestSpec built here from the task, and the resolved flag and the FAIL_TO_PASS / PASS_TO_PASS
lists must agree for 100 % of the runs."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path

import pytest
from swefleet.envs.gradelog import eval_type_of, parser_key, swebench_harness
from swefleet.envs.grading import DockerGrader, grade_many
from swefleet.envs.tasks import load_tasks, prepare_task_images

from swefleet.types import GradeResult, GradeStatus, Task

pytestmark = pytest.mark.integration

DATA = Path(__file__).resolve().parents[2] / "envs" / "data"
QUICKSTART = DATA / "quickstart" / "tasks.jsonl"
PYPI = DATA / "pypi" / "tasks.jsonl"


def bundled() -> list[Task]:
    """The quickstart tasks and the pypi sample, with their images (skips without Docker)."""
    import docker.errors
    from swefleet.envs.images import DEFAULT_BASE_IMAGE, image_exists

    try:
        if not image_exists(DEFAULT_BASE_IMAGE):
            pytest.skip(f"base image {DEFAULT_BASE_IMAGE} not built (envs.images)")
    except docker.errors.DockerException as e:
        pytest.skip(f"Docker is not available: {e}")
    pypi = load_tasks(PYPI)
    if not os.environ.get("SWEFLEET_CROSSCHECK_ALL"):
        first: dict[str, Task] = {}
        for t in pypi:
            first.setdefault(t.repo, t)
        sample = [first[repo] for repo in sorted(first)][::2][:5]  # 5 packages
        # and a task whose test ids hold `::` inside their parameters (JUnit ids are split
        # before the parameters): every such gold patch once read tampered
        sample += [next(t for t in pypi if any("::" in i.partition("[")[2]
                                              for i in t.FAIL_TO_PASS + t.PASS_TO_PASS))]
        pypi = sample
    return prepare_task_images(load_tasks(QUICKSTART), QUICKSTART) + prepare_task_images(
        pypi, PYPI
    )


@pytest.fixture(scope="module")
def graded(tmp_path_factory) -> list[tuple[Task, str, GradeResult]]:
    """(task, patch, swefleet's result) for the gold and the empty patch of every task."""
    tasks = bundled()
    grader = DockerGrader(f"test-crosscheck-{uuid.uuid4().hex[:8]}", timeout_s=120)
    try:
        out = []
        gold, empty = {t.instance_id: t.patch for t in tasks}, {t.instance_id: "" for t in tasks}
        for patches in (gold, empty):
            results = asyncio.run(grade_many(tasks, patches, grader, 2))
            out += [(t, patches[t.instance_id], r) for t, r in zip(tasks, results)]
        return out
    finally:
        grader.close()


def swebench_report(task: Task, patch: str, log: str, tmp: Path) -> dict:
    """swebench's per-instance report for `log` (its TestSpec built from the task's fields)."""
    swebench_harness()
    from swebench.harness.grading import get_eval_report
    from swebench.types import TestSpec

    spec = TestSpec(instance_id=task.instance_id, image=task.image, eval_script_list=[],
                    repo=task.repo, version=task.version, FAIL_TO_PASS=task.FAIL_TO_PASS,
                    PASS_TO_PASS=task.PASS_TO_PASS, log_parser=parser_key(task.log_parser),
                    eval_type=eval_type_of(task))
    path = tmp / f"{task.instance_id}-{'gold' if patch else 'empty'}.log"
    path.write_text(log)
    prediction = {"instance_id": task.instance_id, "model_patch": patch,
                  "model_name_or_path": "crosscheck"}
    return get_eval_report(spec, prediction, str(path), include_tests_status=True)[
        task.instance_id]


def test_decisions_agree_with_swebench_on_every_log(graded, tmp_path):
    assert not [r for _, _, r in graded if r.status == GradeStatus.error], "grading failed"
    disagreements, lists_compared = [], 0
    for task, patch, result in graded:
        report = swebench_report(task, patch, result.log, tmp_path)
        ours = result.status == GradeStatus.resolved
        if ours != report["resolved"]:
            disagreements.append((task.instance_id, bool(patch), ours, report["resolved"]))
        status = report.get("tests_status")
        if status is not None:
            lists_compared += 1
            if (status["FAIL_TO_PASS"], status["PASS_TO_PASS"]) != (
                    result.fail_to_pass, result.pass_to_pass):
                disagreements.append((task.instance_id, bool(patch), "test lists differ"))
    n = len(graded)
    print(f"\ncross-check: {n - len(disagreements)}/{n} decisions agree with swebench "
          f"({n // 2} tasks x gold/empty; test lists compared on {lists_compared} logs)")
    assert disagreements == [], "\n".join(map(str, disagreements))
    assert lists_compared == n  # every log reached swebench's test report
    gold = [r.status for _, p, r in graded if p]
    empty = [r.status for _, p, r in graded if not p]
    assert set(gold) == {GradeStatus.resolved} and set(empty) == {GradeStatus.unresolved}
