"""How an RL run ends: no group is started that no step could train on, and the episodes still
running when the loop stops are recorded for what they are (cancelled at run end, or because the
run stopped), never as a bare "cancelled"."""

import asyncio

import pytest
from swefleet.orchestrator.config import OrchestratorConfig
from swefleet.orchestrator.loop import CANCELLED_AT_RUN_END, CANCELLED_AT_STOP, RLLoop
from swefleet.orchestrator.summary import print_summary

from swefleet.rundir import RunDir, read_jsonl
from swefleet.types import EpisodeStatus, Task, Trajectory, Turn
from tests.unit.test_orchestrator_loop import fake_trainer

pytestmark = pytest.mark.unit
TASKS = [Task(instance_id=f"t{i}", repo="x/x", problem_statement="p") for i in range(2)]


def rollout_hanging_from(version: int, loop_ref: dict):
    """Episodes started while the served policy is older than `version` end at once (rewards
    alternate 0/1, so every group has variance); later ones run until cancelled."""

    async def rollout(task, handle, group_id, sink):
        served = loop_ref["loop"].state.served_version
        traj = Trajectory(episode_id=handle.episode_id, task_id=task.instance_id,
                          group_id=group_id)
        try:
            if served >= version:
                await asyncio.sleep(3600)
            await asyncio.sleep(0.01)
            traj.turns = [Turn(prompt_ids=[1, 2], completion_ids=[3], logprobs=[-1.0],
                               policy_version=served)]
            loop_ref["n"] = loop_ref.get("n", 0) + 1
            traj.status, traj.reward = EpisodeStatus.unresolved, float(loop_ref["n"] % 2)
        finally:
            sink(traj)
        return traj

    return rollout


async def _run(tmp_path, cfg: OrchestratorConfig, hang_from: int, stop_after_s: float = 0):
    run_dir = RunDir(tmp_path)
    ref = {}

    async def update(version, path):
        await asyncio.sleep(0)

    loop = RLLoop(cfg, rollout_hanging_from(hang_from, ref), TASKS, run_dir, update,
                  inline_writes=True)
    ref["loop"] = loop
    trainer = asyncio.create_task(fake_trainer(run_dir, cfg.steps))
    run = asyncio.create_task(loop.run())
    try:
        if stop_after_s:
            await asyncio.sleep(stop_after_s)
            run.cancel()  # what Ctrl-C does to the run
        await asyncio.wait_for(run, 30)
    except asyncio.CancelledError:
        assert stop_after_s
    finally:
        trainer.cancel()
    return run_dir, loop


async def test_a_synchronous_run_starts_no_group_after_its_last_step(tmp_path):
    """async_level 0: the next group waits for the final policy, which nothing trains on."""
    cfg = OrchestratorConfig(steps=2, groups_per_step=1, rollouts_per_task=2, async_level=0,
                             max_concurrent_episodes=8)
    run_dir, _ = await _run(tmp_path, cfg, hang_from=cfg.steps)
    episodes = read_jsonl(run_dir.episodes)
    assert len(episodes) == cfg.steps * cfg.rollouts_per_task
    assert all(e["status"] == "unresolved" for e in episodes)


async def test_episodes_running_at_the_end_are_labelled_cancelled_at_run_end(tmp_path):
    """async_level 1: the group started for the step after the last one is still running when
    the run ends: recorded as cancelled at run end, masked, and counted apart in the summary."""
    cfg = OrchestratorConfig(steps=2, groups_per_step=1, rollouts_per_task=2, async_level=1,
                             max_concurrent_episodes=8)
    run_dir, loop = await _run(tmp_path, cfg, hang_from=1)
    episodes = read_jsonl(run_dir.episodes)
    at_end = [e for e in episodes if e["status"] == "cancelled"]
    assert len(at_end) == cfg.rollouts_per_task and len({e["group_id"] for e in at_end}) == 1
    assert all(e["reason"] == CANCELLED_AT_RUN_END and e["reward"] is None for e in at_end)
    summary = print_summary(run_dir, [], 1.0, loop.state.served_version)
    assert summary["cancelled_at_run_end"] == cfg.rollouts_per_task
    assert "cancelled" not in summary["statuses"]
    assert sum(summary["statuses"].values()) + len(at_end) == len(episodes)


async def test_episodes_running_when_the_run_is_interrupted_say_so(tmp_path):
    cfg = OrchestratorConfig(steps=3, groups_per_step=1, rollouts_per_task=2, async_level=0,
                             max_concurrent_episodes=8)
    run_dir, _ = await _run(tmp_path, cfg, hang_from=1, stop_after_s=0.5)
    cancelled = [e for e in read_jsonl(run_dir.episodes) if e["status"] == "cancelled"]
    assert len(cancelled) == cfg.rollouts_per_task
    assert all(e["reason"] == CANCELLED_AT_STOP for e in cancelled)


def test_an_episode_that_ends_after_the_journal_closed_is_still_saved(tmp_path):
    """A shutdown closes the run's journal while an episode may still be handing over its
    record: that record is written inline, not lost behind a 'journal is closed' error."""
    from swefleet.journal import Journal

    run_dir, journal = RunDir(tmp_path), Journal()
    loop = RLLoop(OrchestratorConfig(steps=1), rollout_hanging_from(0, {}), TASKS, run_dir,
                  None, journal=journal)
    traj = Trajectory(episode_id="e1", task_id="t0", group_id="g")
    assert loop._append(run_dir.episodes, traj) is not None  # handed to the open journal
    journal.close()
    assert journal.closed and loop._append(run_dir.episodes, traj.model_copy(
        update={"episode_id": "e2"})) is None
    assert [e["episode_id"] for e in read_jsonl(run_dir.episodes)] == ["e1", "e2"]
