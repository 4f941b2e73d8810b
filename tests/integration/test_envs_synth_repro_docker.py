"""Reproductions on a bundled PyPI task, in Docker: the check run finds the script the task file
records (it fails on the bug, passes with the gold patch), a task whose deciding tests need
fixtures gets none, and the expert's demonstration saves the script, runs it (a traceback),
fixes the bug, runs it again (exit 0) and is graded resolved."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest
from swefleet.agents.config import AgentConfig
from swefleet.agents.expert_run import expert_demonstrations
from swefleet.envs.config import FarmConfig
from swefleet.envs.farm import DockerFarm
from swefleet.envs.grading import DockerGrader
from swefleet.envs.synth.repro import SECTION, reproduction_in
from swefleet.envs.synth.repro_check import find_reproduction

from swefleet.types import EpisodeStatus
from tests.integration.test_envs_synth_docker import BUNDLED, ready  # noqa: F401 (fixture)

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]


def _first_inflection_task(with_reproduction: bool) -> str:
    """The first inflection task of the bundled file that has (or lacks) a recorded script, so
    that a regenerated task file does not leave the test naming a task that is gone."""
    for line in BUNDLED.read_text().splitlines():
        record = json.loads(line)
        if record["instance_id"].startswith("jpvanhal__inflection") \
                and bool(record.get("reproduction")) == with_reproduction:
            return record["instance_id"]
    raise LookupError(f"no inflection task with reproduction={with_reproduction} in {BUNDLED}")


WITH = _first_inflection_task(True)
WITHOUT = "jpvanhal__inflection-0.5.1.wrong_constant__5cc08843"  # parametrized tests only


@pytest.fixture(scope="module")
def tasks(ready):  # noqa: F811
    from swefleet.envs.tasks import load_tasks, prepare_task_images

    chosen = [t for t in load_tasks(BUNDLED) if t.instance_id in (WITH, WITHOUT)]
    return {t.instance_id: t for t in prepare_task_images(chosen, BUNDLED)}


async def test_check_run_finds_the_recorded_script(tasks):
    from swefleet.envs.containers import docker_client

    task = tasks[WITH]
    found = await find_reproduction(task, docker_client(), FarmConfig())
    assert found.reason == "" and found.script
    assert found.script == task.model_extra["reproduction"]
    assert reproduction_in(task.problem_statement) == found.script
    for name in task.FAIL_TO_PASS:  # no test name leaks through the script
        assert name.split("::")[-1] not in task.problem_statement
    none = await find_reproduction(tasks[WITHOUT], docker_client(), FarmConfig())
    assert (none.script, none.reason) == ("", "no_candidate")
    assert SECTION not in tasks[WITHOUT].problem_statement


def test_recorded_script_fails_on_the_bug_only(tasks):
    task = tasks[WITH]
    script = task.model_extra["reproduction"]
    run = ["docker", "run", "--rm", "-i", "--network", "none", "-w", "/testbed", task.image,
           "bash", "-c"]
    buggy = subprocess.run([*run, "python3 -"], input=script, capture_output=True,
                           text=True, check=False)
    assert buggy.returncode != 0 and "Error" in buggy.stderr
    patch_and_run = f"cat > /tmp/fix.patch <<'PATCH'\n{task.patch}\nPATCH\n" \
                    "git apply /tmp/fix.patch && python3 -"
    fixed = subprocess.run([*run, patch_and_run], input=script, capture_output=True,
                           text=True, check=False)
    assert fixed.returncode == 0, fixed.stderr[-2000:]


@pytest.mark.parametrize("attach", [True, False])
async def test_expert_runs_the_reproduction_before_and_after_the_fix(tasks, tok, attach):
    """With the script attached (saved in the sandbox before the first turn, the issue says
    so) the expert runs it as it is; else it saves it first. Either way it fails on the bug and
    passes after the fix."""
    run_id = f"test-repro-{uuid.uuid4().hex[:8]}"
    agent = AgentConfig(scaffold="tools", max_steps=3, max_tokens_per_turn=200,
                        context_budget_tokens=16384, command_timeout_s=60,
                        attach_reproduction=attach)
    grader = DockerGrader(run_id, timeout_s=300, max_parallel=1)
    try:
        async with DockerFarm(run_id) as farm:
            (demo,) = await expert_demonstrations([tasks[WITH]], farm, grader, tok, agent,
                                                  concurrency=1)
    finally:
        grader.close()
    assert demo.kept, (demo.reason, demo.detail)
    traj = demo.trajectory
    assert traj.status == EpisodeStatus.resolved
    commands = [json.loads(t.action)["arguments"].get("command", "") if t.action.startswith("{")
                else t.action for t in traj.turns]
    run = "python3 /tmp/repro.py" if attach else "cat > /tmp/repro.py"
    first = next(i for i, c in enumerate(commands) if c.startswith(run))
    assert "Traceback" in traj.turns[first].observation
    assert not any(c.startswith("cat > /tmp/repro.py") for c in commands) if attach else True
    rerun = len(commands) - 1 - commands[::-1].index("python3 /tmp/repro.py")
    assert rerun > first and "Traceback" not in traj.turns[rerun].observation
