"""The RL loop's scheduling contracts, with an in-process environment and trainer stand-in."""

import asyncio
import json

import pytest
from swefleet.orchestrator.config import OrchestratorConfig
from swefleet.orchestrator.loop import RLLoop, RunAborted

from swefleet.batch import read_batch
from swefleet.rundir import RunDir
from swefleet.types import EpisodeStatus, Task, Trajectory, Turn

pytestmark = pytest.mark.unit
TASKS = [Task(instance_id=f"t{i}", repo="x/x", problem_statement="p") for i in range(3)]


async def fake_trainer(run_dir: RunDir, steps: int, delay_s: float = 0.01) -> None:
    for step in range(steps):
        while not run_dir.batch_path(step).exists():
            await asyncio.sleep(0.005)
        await asyncio.sleep(delay_s)
        run_dir.weights_path(step + 1).mkdir()


def make_rollout(state: dict, hang_every: int = 0, reward=lambda n: float(n % 2)):
    """Each episode: one turn at the served version; every `hang_every`-th one hangs forever."""

    async def rollout(task, handle, group_id, sink):
        state["n"] = n = state.get("n", 0) + 1
        traj = Trajectory(episode_id=handle.episode_id, task_id=task.instance_id,
                          group_id=group_id)
        try:
            if hang_every and n % hang_every == 0:
                await asyncio.sleep(3600)
            await asyncio.sleep(0.01)
            traj.turns = [Turn(prompt_ids=[1, 2], completion_ids=[3], logprobs=[-1.0],
                               policy_version=state["loop"].state.served_version)]
            traj.status, traj.reward = EpisodeStatus.unresolved, reward(n)
        finally:
            sink(traj)
        return traj

    return rollout


async def run_loop(tmp_path, cfg: OrchestratorConfig, rollout_state: dict, **kw):
    run_dir = RunDir(tmp_path)

    async def update(version, path):
        await asyncio.sleep(0)

    loop = RLLoop(cfg, make_rollout(rollout_state, **kw), TASKS, run_dir, update)
    rollout_state["loop"] = loop
    trainer = asyncio.create_task(fake_trainer(run_dir, cfg.steps))
    try:
        records = await asyncio.wait_for(loop.run(), 30)
    finally:
        trainer.cancel()
    return loop, records, run_dir


async def test_hung_episode_is_cut_and_never_holds_a_batch(tmp_path):
    cfg = OrchestratorConfig(steps=4, groups_per_step=2, rollouts_per_task=4,
                             max_concurrent_episodes=16, straggler_grace=3.0)
    loop, records, run_dir = await run_loop(tmp_path, cfg, {}, hang_every=5)
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    assert loop.state.drops.get("straggler", 0) >= 1
    # every drop up to the last batch is in some step's record; a straggler cut while the loop
    # waits for the trainer's last version comes after every step record
    assert 1 <= sum(r["drops/step"] for r in records) <= sum(loop.state.drops.values())
    assert all(0 <= r["rollout/drop_rate"] < 1 for r in records)
    assert any(r["rollout/drop_rate"] > 0 for r in records)
    episodes = [json.loads(x) for x in run_dir.episodes.read_text().splitlines()]
    cut = [e for e in episodes if e["reason"].startswith("straggler cut")]
    assert cut and all(e["status"] == "cancelled" and e["reward"] is None for e in cut)


async def test_an_episode_being_graded_is_not_cut_as_a_straggler(tmp_path):
    """Failures that skip grading end fast; a success still in grading must not be cut for it
    (that would drop exactly the rewarded episodes)."""
    cfg = OrchestratorConfig(steps=1, groups_per_step=1, rollouts_per_task=4,
                             max_concurrent_episodes=4, straggler_grace=2.0, async_level=0)
    started: list[str] = []

    async def rollout(task, handle, group_id, sink):
        started.append(handle.episode_id)
        traj = Trajectory(episode_id=handle.episode_id, task_id=task.instance_id,
                          group_id=group_id)
        try:
            await asyncio.sleep(0.05)  # the agent's turns
            traj.turns = [Turn(prompt_ids=[1, 2], completion_ids=[3], logprobs=[-1.0],
                               policy_version=0)]
            traj.status, traj.reward = EpisodeStatus.format_errors, 0.0
            if handle.episode_id == started[0]:
                handle.grading = True
                await asyncio.sleep(1.0)  # 20x the others' whole episode
                traj.status, traj.reward = EpisodeStatus.resolved, 1.0
        finally:
            sink(traj)
        return traj

    run_dir = RunDir(tmp_path)

    async def update(version, path):
        pass

    loop = RLLoop(cfg, rollout, TASKS[:1], run_dir, update)
    trainer = asyncio.create_task(fake_trainer(run_dir, cfg.steps))
    try:
        await asyncio.wait_for(loop.run(), 30)
    finally:
        trainer.cancel()
    assert loop.state.drops.get("straggler", 0) == 0
    episodes = [json.loads(x) for x in run_dir.episodes.read_text().splitlines()]
    graded = next(e for e in episodes if e["episode_id"] == started[0])
    assert (graded["status"], graded["reward"]) == ("resolved", 1.0)
    group = [e for e in episodes if e["group_id"] == graded["group_id"]]
    assert sorted(e["reward"] for e in group) == [0.0, 0.0, 0.0, 1.0]


async def test_batches_respect_staleness_and_hold_each_episode_once(tmp_path):
    cfg = OrchestratorConfig(steps=5, groups_per_step=2, rollouts_per_task=2,
                             max_concurrent_episodes=8, async_level=1, max_off_policy_steps=1)
    _, _, run_dir = await run_loop(tmp_path, cfg, {})
    seen = []
    for step in range(5):
        arrays, meta = read_batch(run_dir.batch_path(step))
        assert arrays["policy_version"].min() >= step - 1
        seen += meta["episode_ids"]
    assert len(seen) == len(set(seen))


async def test_all_masked_batches_abort_with_a_clear_message(tmp_path):
    cfg = OrchestratorConfig(steps=2, groups_per_step=1, rollouts_per_task=2,
                             max_concurrent_episodes=4, max_empty_batches=2)

    async def broken(task, handle, group_id, sink):
        traj = Trajectory(episode_id=handle.episode_id, task_id=task.instance_id,
                          status=EpisodeStatus.infra_error, reason="daemon gone")
        sink(traj)
        return traj

    async def update(version, path):
        pass

    loop = RLLoop(cfg, broken, TASKS, RunDir(tmp_path), update)
    with pytest.raises(RunAborted, match="no trainable sample"):
        await asyncio.wait_for(loop.run(), 30)


async def test_a_rollout_that_raises_fails_the_run_instead_of_hanging(tmp_path):
    cfg = OrchestratorConfig(steps=2, groups_per_step=1, rollouts_per_task=2)

    async def buggy(task, handle, group_id, sink):
        raise OSError(28, "No space left on device")  # e.g. the sink could not append

    async def update(version, path):
        pass

    loop = RLLoop(cfg, buggy, TASKS, RunDir(tmp_path), update)
    with pytest.raises(RunAborted, match="raised OSError.*No space left"):
        await asyncio.wait_for(loop.run(), 10)


def _exited_trainer(run_dir: RunDir):
    import subprocess
    import sys

    with open(run_dir.logs / "trainer.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-c", "print('stopped by SIGTERM')"], stdout=log)
        proc.wait()
    return proc


async def test_trainer_exiting_0_before_the_last_version_fails_the_run(tmp_path):
    """The trainer exits 0 on SIGTERM: the loop must not wait weights_timeout_s (600 s) for it."""
    from swefleet.orchestrator.trainer_proc import trainer_problem

    run_dir = RunDir(tmp_path)
    proc = _exited_trainer(run_dir)
    cfg = OrchestratorConfig(steps=2, groups_per_step=1, rollouts_per_task=2)
    state: dict = {}

    async def update(version, path):
        pass

    loop = RLLoop(cfg, make_rollout(state), TASKS, run_dir, update,
                  health=lambda: trainer_problem(proc, run_dir))
    state["loop"] = loop
    with pytest.raises(RunAborted, match="exited with code 0(.|\n)*stopped by SIGTERM"):
        await asyncio.wait_for(loop.run(), 10)


async def test_trainer_exiting_after_the_last_version_is_a_normal_end(tmp_path):
    run_dir = RunDir(tmp_path)
    cfg = OrchestratorConfig(steps=3, groups_per_step=1, rollouts_per_task=2)
    state: dict = {}
    trainer = asyncio.create_task(fake_trainer(run_dir, cfg.steps, delay_s=0.0))

    async def update(version, path):
        pass

    loop = RLLoop(cfg, make_rollout(state), TASKS, run_dir, update,
                  health=lambda: "trainer process exited with code 0" if trainer.done() else None)
    state["loop"] = loop
    records = await asyncio.wait_for(loop.run(), 20)
    assert [r["step"] for r in records] == [0, 1, 2]


async def test_weights_timeout_is_a_clear_run_error(tmp_path):
    cfg = OrchestratorConfig(steps=2, groups_per_step=1, rollouts_per_task=2,
                             weights_timeout_s=0.3)
    state: dict = {}

    async def update(version, path):
        pass

    loop = RLLoop(cfg, make_rollout(state), TASKS, RunDir(tmp_path), update)  # no trainer
    state["loop"] = loop
    with pytest.raises(RunAborted, match=r"no policy v2 within weights_timeout_s=0.3s"):
        await asyncio.wait_for(loop.run(), 10)


PAUSED = ("09:00:00 WARNING swefleet.trainer.disk_guard: low disk: 0.61 GB free on the filesystem"
          " of run/weights, 0.01 GB needed and trainer.disk_min_free_gb=1 kept free: weights v2"
          " paused until there is room (checked every 10 s)")


@pytest.mark.parametrize(("log_lines", "says_disk"), [
    ([PAUSED], True),
    ([PAUSED, "09:01:00 WARNING swefleet.trainer.disk_guard: disk: room again (2.00 GB free)"],
     False),
    (["09:00:00 INFO swefleet.trainer.main: step 0"], False),
])
async def test_weights_timeout_names_an_export_waiting_for_disk(tmp_path, log_lines, says_disk):
    run_dir = RunDir(tmp_path)
    (run_dir.logs / "trainer.log").write_text("\n".join(log_lines) + "\n")
    cfg = OrchestratorConfig(steps=2, groups_per_step=1, rollouts_per_task=2,
                             weights_timeout_s=0.3)
    state: dict = {}

    async def update(version, path):
        pass

    loop = RLLoop(cfg, make_rollout(state), TASKS, run_dir, update)
    state["loop"] = loop
    with pytest.raises(RunAborted) as err:
        await asyncio.wait_for(loop.run(), 10)
    assert ("waits for disk space (low disk: 0.61 GB free" in str(err.value)) == says_disk
    assert ("see logs/trainer.log" in str(err.value)) != says_disk


@pytest.mark.parametrize("async_level", [0, 1])
async def test_empty_batches_are_recut_without_a_hang_and_then_abort(tmp_path, async_level):
    """A batch with nothing trainable (zero-variance groups dropped) is re-cut: the producer
    starts replacement groups for the same step, also when synchronous (async_level 0, where
    a group for the next step would wait for a version that only that batch can produce)."""
    cfg = OrchestratorConfig(steps=3, groups_per_step=1, rollouts_per_task=2, async_level=async_level,
                             max_concurrent_episodes=4, drop_zero_variance_groups=True,
                             max_empty_batches=3)
    with pytest.raises(RunAborted, match="no trainable sample"):  # every group: equal rewards
        await run_loop(tmp_path, cfg, {}, reward=lambda n: 0.0)


@pytest.mark.parametrize("async_level", [0, 1])
async def test_a_recut_step_trains_on_the_replacement_groups(tmp_path, async_level):
    cfg = OrchestratorConfig(steps=3, groups_per_step=1, rollouts_per_task=2, async_level=async_level,
                             max_concurrent_episodes=4, drop_zero_variance_groups=True,
                             max_empty_batches=3)
    # the first 2 groups (4 episodes) have equal rewards, then rewards alternate
    loop, records, _ = await run_loop(tmp_path, cfg, {}, reward=lambda n: 0.0 if n <= 4 else n % 2)
    assert [r["step"] for r in records] == [0, 1, 2]
    assert loop.state.drops.get("empty_batch") == 2 and loop.discarded_groups == 2


@pytest.mark.parametrize("async_level", [0, 1])
async def test_zero_variance_groups_are_resampled_up_to_the_limit(tmp_path, async_level):
    """DAPO's dynamic sampling: a group whose rewards are all equal is set aside and a new group
    feeds the same step, up to `resample_zero_variance_groups` a step; the set-aside episodes
    count in the step's figures, not in its batch or its drop rate."""
    cfg = OrchestratorConfig(steps=2, groups_per_step=1, rollouts_per_task=2,
                             async_level=async_level, max_concurrent_episodes=2,
                             drop_zero_variance_groups=True, resample_zero_variance_groups=2)
    # episodes 1-4 (groups 1-2): equal rewards; then rewards alternate
    loop, records, run_dir = await run_loop(tmp_path, cfg, {},
                                            reward=lambda n: 0.0 if n <= 4 else n % 2)
    assert [r["step"] for r in records] == [0, 1]
    first = records[0]
    assert first["drops/zero_variance_resampled"] == 4  # 2 groups of 2 episodes, set aside
    assert first["rollout/drop_rate"] == 0.0  # scored episodes, not lost ones
    assert first["batch/samples"] == 2  # the batch: the one group with a signal
    assert first["rollout/episodes"] == 6 and first["rollout/reward_n"] == 6  # all scored
    assert "empty_batch" not in loop.state.drops
    drops = [json.loads(x) for x in run_dir.drops.read_text().splitlines()]
    assert sum(d["n"] for d in drops if d["reason"] == "zero_variance_resampled") == 4

    # the limit: past it, a zero-variance group is batched (and dropped from it) as before
    capped = OrchestratorConfig(**{**cfg.model_dump(), "resample_zero_variance_groups": 1})
    loop, records, _ = await run_loop(tmp_path / "capped", capped, {},
                                      reward=lambda n: 0.0 if n <= 4 else n % 2)
    assert loop.state.drops["zero_variance_resampled"] == 2
    assert loop.state.drops["empty_batch"] == 1  # group 2 was batched: nothing to train on


def test_resampling_needs_zero_variance_groups_dropped():
    with pytest.raises(ValueError, match="set drop_zero_variance_groups"):
        OrchestratorConfig(resample_zero_variance_groups=2)
