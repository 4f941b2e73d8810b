"""Drop counters survive a stop and resume: each dropped episode is counted once, under the
reason it was dropped for, exactly as an uninterrupted run would count it."""

import asyncio
import json

import pytest
from swefleet.orchestrator.config import OrchestratorConfig
from swefleet.orchestrator.loop import RLLoop
from swefleet.orchestrator.resume import find_resume_point

from swefleet.rundir import RunDir
from swefleet.types import EpisodeStatus, Task, Trajectory, Turn

pytestmark = pytest.mark.unit
TASKS = [Task(instance_id=f"t{i}", repo="x/x", problem_statement="p") for i in range(3)]
BORN_STALE = -1000
"""A policy version so old that the episode is stale at any step (dropped in the queue)."""


async def trainer(run_dir: RunDir, steps: int) -> None:
    """Publishes v(step+1) once batch `step` exists; already published versions are kept."""
    for step in range(steps):
        while not run_dir.batch_path(step).exists():
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.01)
        run_dir.weights_path(step + 1).mkdir(exist_ok=True)


def scripted_rollout(state: dict, first_run: bool):
    """First run: the first group's first episode hangs (dropped in flight once the served
    policy is more than max_off_policy_steps ahead of it), the second group is born stale
    (dropped in the queue). Resumed run: every episode is fresh."""
    roles: dict[str, str] = {}

    async def rollout(task, handle, group_id, sink):
        role = roles.setdefault(group_id, ("hang", "stale", "fresh")[min(len(roles), 2)]
                                if first_run else "fresh")
        traj = Trajectory(episode_id=handle.episode_id, task_id=task.instance_id,
                          group_id=group_id)
        try:
            if role == "hang" and not state.setdefault("hung", False):
                state["hung"] = True
                await asyncio.sleep(3600)
            await asyncio.sleep(0.01)
            version = BORN_STALE if role == "stale" else state["loop"].state.served_version
            traj.turns = [Turn(prompt_ids=[1, 2], completion_ids=[3], logprobs=[-1.0],
                               policy_version=version)]
            traj.status, traj.reward = EpisodeStatus.unresolved, 1.0
        finally:
            sink(traj)
        return traj

    return rollout


async def run_once(run_dir: RunDir, cfg: OrchestratorConfig, first_run: bool) -> list[dict]:
    async def update(version, path):
        await asyncio.sleep(0)

    state: dict = {}
    loop = RLLoop(cfg, scripted_rollout(state, first_run), TASKS, run_dir, update,
                  resume=find_resume_point(run_dir))
    state["loop"] = loop
    publisher = asyncio.create_task(trainer(run_dir, cfg.steps))
    try:
        return await asyncio.wait_for(loop.run(), 30)
    finally:
        publisher.cancel()


async def test_a_stopped_and_resumed_run_counts_each_dropped_episode_once(tmp_path):
    run_dir = RunDir(tmp_path)
    # async_level 2: the hung group, the stale group and a fresh one all start at v0; the hung
    # episode (v0) is dropped in flight when v3 is served
    first = OrchestratorConfig(steps=3, groups_per_step=1, rollouts_per_task=2,
                               max_concurrent_episodes=8, async_level=2, max_off_policy_steps=2,
                               straggler_grace=None)
    records = await run_once(run_dir, first, first_run=True)
    assert [r["step"] for r in records] == [0, 1, 2]
    episodes = [json.loads(x) for x in run_dir.episodes.read_text().splitlines()]
    assert sum(e["status"] == "dropped_stale" for e in episodes) == 1  # the hung one, in flight

    # resumed with a looser staleness bound: the hung group's finished member is fresh again
    resumed = first.model_copy(update={"steps": 5, "max_off_policy_steps": 100})
    records = await run_once(run_dir, resumed, first_run=False)
    assert [r["step"] for r in records] == [3, 4]

    all_records = [json.loads(x) for x in run_dir.metrics.read_text().splitlines()]
    last = all_records[-1]
    drops = {k: v for k, v in last.items() if k.startswith("drops/") and k != "drops/step"}
    assert drops == {"drops/stale_in_flight": 1, "drops/stale_in_queue": 2}
    assert sum(r["drops/step"] for r in all_records) == 3
