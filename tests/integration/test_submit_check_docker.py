"""The check at submit in a real Docker sandbox: the issue's reproduction runs on the agent's
code from the repository's folder at the first submit; the failing run is shown and the submit
refused once; the agent's shell keeps its folder; after the fix the submit is accepted."""

from __future__ import annotations

import uuid

import pytest
from swefleet.agents.config import AgentConfig
from swefleet.agents.loop import run_episode
from swefleet.agents.scaffolds import SUBMIT_SENTINEL
from swefleet.agents.scripted import ScriptedModel
from swefleet.envs import containers, reaper
from swefleet.envs.farm import DockerFarm
from swefleet.envs.synth.repro import with_reproduction

from swefleet.types import EpisodeStatus
from tests.integration.test_envs_grading_docker import bundled_tasks

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

SCRIPT = ("import sys\nsys.path.insert(0, '.')  # not installed: imported from the folder it runs in\n"
          "from textkit import slugify\n"
          "got = slugify('Hello World', max_length=50)\n"
          "assert got == 'hello-world', got\n")


def bash(command: str) -> str:
    return f"Next.\n```bash\n{command}\n```"


async def test_a_failing_reproduction_refuses_the_first_submit_in_docker(tok):
    slug = next(t for t in bundled_tasks() if t.instance_id == "textkit__textkit-1")
    task = slug.model_copy(update={"problem_statement": with_reproduction(
        slug.problem_statement, SCRIPT)})
    submit = bash(f"echo {SUBMIT_SENTINEL}")
    fix = bash(f"cd ~- && patch -p1 <<'EOF'\n{task.patch}EOF")
    replies = [bash("cd /tmp"), submit, bash("pwd"), fix, submit]
    run_id = f"test-submit-check-{uuid.uuid4().hex[:8]}"
    config = AgentConfig(check_reproduction_at_submit=True, command_timeout_s=30,
                         max_tokens_per_turn=400, context_budget_tokens=16384)
    async with DockerFarm(run_id) as farm, farm.acquire(task) as sandbox:
        model = ScriptedModel(tok, replies, version=1)
        traj = await run_episode(task, sandbox, model, tok, config, "ep-0", "g-0")
    assert not reaper.leftover_containers(containers.docker_client(), run_id)

    assert (traj.status, traj.reason, traj.refused_submits) == (
        EpisodeStatus.unresolved, "submitted", 1), traj.reason
    refusal = traj.turns[1].observation
    assert refusal.startswith("Not submitted yet") and "AssertionError: hello\n" in refusal, refusal
    assert traj.turns[2].observation.count("/tmp") == 1  # the check left the shell in /tmp
    assert "len(slug) > max_length" in traj.model_patch
