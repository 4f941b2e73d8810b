"""The semver gold patch, whose planted CLI test file used to fail to collect at random
(a copy placed above the helper its parametrize list calls), grades resolved every time."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from swefleet.envs.gradelog import regrade_from_log
from swefleet.envs.grading import DockerGrader
from swefleet.envs.tasks import load_tasks, prepare_task_images

from swefleet.types import GradeStatus

pytestmark = pytest.mark.integration

TASKS_FILE = Path(__file__).resolve().parents[2] / "envs/data/pypi/tasks.jsonl"
SEMVER = "python-semver__python-semver-3.1.2.wrong_operator__d32db797"
K = 3


def test_semver_gold_resolves_every_time():
    import docker.errors
    from swefleet.envs.images import DEFAULT_BASE_IMAGE, image_exists

    try:
        if not image_exists(DEFAULT_BASE_IMAGE):
            pytest.skip(f"base image {DEFAULT_BASE_IMAGE} not built (envs.images)")
    except docker.errors.DockerException as e:
        pytest.skip(f"Docker is not available: {e}")
    task, = [t for t in load_tasks(TASKS_FILE) if t.instance_id == SEMVER]
    task, = prepare_task_images([task], TASKS_FILE)
    grader = DockerGrader(f"test-plant-{uuid.uuid4().hex[:8]}", timeout_s=120)
    try:
        for _ in range(K):
            r = grader.grade_sync(task, task.patch)
            assert r.status == GradeStatus.resolved, (r.reason, r.log[-3000:])
            assert "NameError" not in r.log
            assert regrade_from_log(task, r.log).status == GradeStatus.resolved
    finally:
        grader.close()
