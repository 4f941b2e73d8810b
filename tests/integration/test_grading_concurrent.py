"""Many grading runs at once with canaries on: every gold patch resolves, none ends `infra`.

Each run parses its test files in its own grading thread (canary planting). While they run,
this process also parses in other threads with a garbage collection due at every allocation
(the unit hammer of `envs/safe_ast.py`), so that threads switch inside a parse: a parse outside
`safe_ast`'s lock would fail with CPython 3.11's `SystemError: AST constructor recursion depth
mismatch` and its grade would be an infrastructure error."""

from __future__ import annotations

import asyncio
import threading

import pytest
from swefleet.envs import safe_ast
from swefleet.envs.gradelog import is_infra
from swefleet.envs.grading import DockerGrader, grade_many

from swefleet.types import GradeStatus
from tests.integration.test_envs_grading_docker import RUN_ID, bundled_tasks, containers_of_run
from tests.unit.test_envs_safe_ast import hammer

pytestmark = pytest.mark.integration


def test_gold_patches_graded_all_at_once_with_canaries():
    tasks = bundled_tasks()
    grader = DockerGrader(RUN_ID, timeout_s=120, max_parallel=len(tasks))
    done, errors = threading.Event(), []

    def keep_parsing():  # in bursts: a collection at every allocation slows every thread of
        # this process, and the grades (Docker calls, log parsing) must still finish in time
        while not done.is_set() and not errors:  # (a parse that failed once fails again)
            errors.extend(hammer(safe_ast.parse, threads=2, rounds=10))
            done.wait(0.05)

    parsing = threading.Thread(target=keep_parsing)
    parsing.start()
    patches = {t.instance_id: t.patch for t in tasks}
    grading = grade_many(tasks, patches, grader, concurrency=len(tasks), infra_retries=0)
    try:  # (a tree built while another thread parsed can be corrupt: a walk that never ends)
        results = asyncio.run(asyncio.wait_for(grading, 300))
    finally:
        done.set()
        parsing.join()
        grader.close(abandon=True)
    assert errors == []
    for task, r in zip(tasks, results):
        assert not is_infra(r) and r.status == GradeStatus.resolved, (task.instance_id, r.reason)
        assert '"canaries": {"pass": [' in r.log
    assert containers_of_run() == []
