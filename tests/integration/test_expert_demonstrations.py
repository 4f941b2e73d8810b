"""The scripted expert in real Docker sandboxes on quickstart train tasks (no `synth` record: the
file and function come from the gold patch): its episodes run the tests, read the function,
fix it with `str_replace`, run the tests again and submit, in that order, through the real
agent loop; the real grader resolves them; a patch that does not fix the bug is dropped as
`grade_unresolved`, counted; nothing of the hidden tests appears in what the expert wrote."""

from __future__ import annotations

import json
import uuid

import pytest
from swefleet.agents.config import AgentConfig
from swefleet.agents.expert_run import expert_demonstrations, summary
from swefleet.envs import containers, reaper
from swefleet.envs.farm import DockerFarm
from swefleet.envs.grading import DockerGrader

from swefleet.types import EpisodeStatus, GradeStatus
from tests.integration.test_envs_grading_docker import bundled_tasks

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]


@pytest.fixture(scope="module")
def tasks():
    return {t.instance_id: t for t in bundled_tasks() if t.split == "train"}


async def _demonstrations(tasks, tok, scaffold: str):
    run_id = f"test-expert-{uuid.uuid4().hex[:8]}"
    agent = AgentConfig(scaffold=scaffold, max_steps=3, max_tokens_per_turn=200,
                        context_budget_tokens=16384, command_timeout_s=30)
    grader = DockerGrader(run_id, timeout_s=120, max_parallel=2)
    try:
        async with DockerFarm(run_id) as farm:
            demos = await expert_demonstrations(tasks, farm, grader, tok, agent, concurrency=3)
    finally:
        grader.close()
    assert not reaper.leftover_containers(containers.docker_client(), run_id)
    return demos


def _tool(turn) -> str:
    return json.loads(turn.action)["name"] if turn.action.startswith("{") else "bash"


async def test_tool_demonstrations_are_resolved_and_follow_the_workflow(tasks, tok):
    slug, ranges = tasks["textkit__textkit-1"], tasks["textkit__textkit-4"]  # one insertion
    wrong = slug.model_copy(update={  # applies, but `<=` does not fix the bug
        "instance_id": "textkit__textkit-1-wrong",
        "patch": slug.patch.replace("+    if max_length is not None and len(slug) > max_length",
                                    "+    if max_length is not None and len(slug) <= max_length"),
    })
    demos = await _demonstrations([slug, ranges, wrong], tok, "tools")
    info = summary(demos)
    assert (info["kept"], info["reasons"]) == (2, {"grade_unresolved": 1}), info
    for demo in demos[:2]:
        traj = demo.trajectory
        assert traj.status == EpisodeStatus.resolved and traj.grade.status == GradeStatus.resolved
        tools = [_tool(t) for t in traj.turns]
        assert tools == ["bash", "bash", "bash", "bash", "view", "str_replace", "bash", "bash",
                         "submit"]
        assert traj.turns[0].action == "ls tests"  # the test files, found (never told)
        first, last = traj.turns[1].action, traj.turns[-2].action  # a bash call: the command
        assert first.startswith("python3 -m pytest -q -x tests/test_") and first == last
        assert first.split()[-1].removeprefix("tests/") in traj.turns[0].observation
        assert "passed" in traj.turns[1].observation and "passed" in traj.turns[-2].observation
        assert "Edited textkit/" in traj.turns[5].observation
        written = "".join(tok.decode(t.completion_ids) for t in traj.turns)
        task = tasks[traj.task_id]
        assert not any(test.split("::")[-1] in written for test in task.FAIL_TO_PASS)
        assert tok.decode(traj.turns[1].prompt_ids).count("<tool_response>") == 1  # exact deltas
    assert "Traceback" in demos[1].trajectory.turns[2].observation  # parse_ranges("1-3,") raised


async def test_bash_demonstration_of_a_module_level_constant(tasks, tok):
    (demo,) = await _demonstrations([tasks["textkit__textkit-3"]], tok, "bash")
    assert demo.kept, (demo.reason, demo.detail)
    actions = [t.action for t in demo.trajectory.turns]
    assert actions[0] == "ls tests"
    assert actions[1].startswith("python3 -m pytest -q -x tests/test_duration.py")
    assert actions[3] == "grep -rn UNIT_SECONDS textkit"
    assert actions[4].startswith("cat -n textkit/duration.py | sed -n")
    assert actions[5].startswith("python3 - <<'EOF'") and "84600" in actions[5]
    assert actions[-1] == "echo SWEFLEET_SUBMIT"
