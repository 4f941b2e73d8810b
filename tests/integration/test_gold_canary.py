"""The live gold canary with real Docker on a quickstart task: one step's worth of episodes (two,
rate 1.0) also grades the task's gold patch beside them; a task whose gold patch is broken shows
as `env/gold_canary_failures` while the episodes' rewards stay what their own patches earned."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest
from swefleet.agents.config import AgentConfig
from swefleet.agents.scripted import ScriptedModel
from swefleet.envs import containers, reaper
from swefleet.envs.farm import DockerFarm
from swefleet.envs.grading import DockerGrader
from swefleet.orchestrator.gold_canary import GoldCanary
from swefleet.orchestrator.rollout import RolloutContext, RolloutHandle, run_rollout
from swefleet.trainer.sft_oracle import oracle_replies

from swefleet.types import EpisodeStatus
from tests.integration.test_envs_grading_docker import bundled_tasks

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]


@pytest.fixture(scope="module")
def task():
    return bundled_tasks()[0]


async def _one_step(task, played, tok, rate: float = 1.0):
    """Two episodes of `task` replaying `played`'s oracle (apply its gold patch, submit), graded
    as in `swefleet rl`, with the canary on a one-slot grader of its own; then the gold grades
    are waited for (a run does not wait) and the step's metrics read."""
    run_id = f"test-gold-{uuid.uuid4().hex[:8]}"
    replies = oracle_replies(played, "bash")
    longest = max(len(tok.encode(r)) + 1 for r in replies)
    agent = AgentConfig(max_steps=4)
    agent = agent.model_copy(update={"max_tokens_per_turn": max(agent.max_tokens_per_turn,
                                                                longest)})
    grader = DockerGrader(run_id, timeout_s=120, max_parallel=2)
    canary = GoldCanary(DockerGrader(run_id, timeout_s=120, max_parallel=1), rate, seed=0)
    try:
        async with DockerFarm(run_id) as farm:
            ctx = RolloutContext(farm=farm, grader=grader, model=ScriptedModel(tok, replies),
                                 tokenizer=tok, agent=agent, gold_canary=canary)
            trajs = await asyncio.gather(*(run_rollout(ctx, task, RolloutHandle(f"ep{i}", 0),
                                                       "g", lambda t: None) for i in range(2)))
            pending_after_episodes = canary.pending
            await canary.drain()
    finally:
        grader.close()
        canary.grader.close()
    assert not reaper.leftover_containers(containers.docker_client(), run_id)
    return trajs, pending_after_episodes, canary.step_metrics()


async def test_gold_graded_beside_the_episodes(task, tok):
    trajs, pending, metrics = await _one_step(task, task, tok)
    assert [t.status for t in trajs] == [EpisodeStatus.resolved] * 2
    assert [t.reward for t in trajs] == [1.0, 1.0]
    assert pending >= 1  # the episodes ended while their gold grades still ran
    assert metrics["env/gold_canary_runs"] == 2 and metrics["env/gold_canary_failures"] == 0
    assert metrics["env/gold_canary_infra_errors"] == 0 and metrics["env/gold_canary_pending"] == 0


async def test_broken_gold_patch_is_a_failure_and_rewards_are_unchanged(task, tok, caplog):
    lines = task.patch.splitlines(keepends=True)
    corrupted = "".join(line for line in lines if not line.startswith("@@"))  # hunks gone
    broken = task.model_copy(update={"patch": corrupted})
    with caplog.at_level(logging.WARNING, logger="swefleet.orchestrator.gold_canary"):
        trajs, _, metrics = await _one_step(broken, task, tok)
    # the episodes applied the real fix: graded on their own patch, as without the canary
    assert [t.status for t in trajs] == [EpisodeStatus.resolved] * 2
    assert [t.reward for t in trajs] == [1.0, 1.0]
    assert metrics["env/gold_canary_runs"] == 2 and metrics["env/gold_canary_failures"] == 2
    warned = [r.getMessage() for r in caplog.records if "gold canary" in r.getMessage()]
    assert len(warned) == 2 and all(task.instance_id in m for m in warned)
