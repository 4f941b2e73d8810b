"""A task file whose image cannot be built: one clear error naming the file, the task and what
failed (the CLI prints it as one line), never a Docker traceback."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest
from swefleet.envs.tasks import TaskFileError, load_tasks, prepare_task_images

pytestmark = pytest.mark.integration


def test_source_patch_that_does_not_apply_names_the_task_and_the_error(tmp_path):
    from swefleet.envs.images import DEFAULT_BASE_IMAGE, image_exists

    if not image_exists(DEFAULT_BASE_IMAGE):
        pytest.skip(f"base image {DEFAULT_BASE_IMAGE} missing")
    (tmp_path / "repo").mkdir()
    (tmp_path / "repo" / "a.py").write_text("x = 1\n")
    (tmp_path / "bug.patch").write_text(
        "diff --git a/a.py b/a.py\n--- a/a.py\n+++ b/a.py\n@@ -1 +1 @@\n-y = 1\n+y = 2\n"
    )
    workdir = f"/testbed-{uuid.uuid4().hex[:8]}"  # marks this build's step containers
    record = {"instance_id": "bp__bp-1", "repo": "bp/bp", "problem_statement": "x",
              "source_dir": "repo", "source_patch": "bug.patch", "workdir": workdir}
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(record) + "\n")
    with pytest.raises(TaskFileError) as e:
        prepare_task_images(load_tasks(path), path)
    msg = str(e.value)
    assert msg.startswith(f"{path}: instance_id='bp__bp-1': its image could not be built: ")
    assert "patch does not apply" in msg and "\x1b" not in msg and "\n" not in msg
    left = subprocess.run(["docker", "ps", "-a", "--no-trunc", "--format", "{{.Command}}"],
                          capture_output=True, text=True, check=True).stdout
    assert workdir not in left, "the failed build left its step container behind"
