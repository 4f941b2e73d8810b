"""The orchestrator/trainer hand-off wakes on the files' renames, not on a polling timer.

Each side's wait is given a backstop re-check no test waits for; the watcher records what woke
it, and every file must have been found by its rename event (or already been there)."""

import asyncio
import os
import threading
import time

import numpy as np
import pytest
import swefleet.orchestrator.loop as loop_mod
import swefleet.trainer.main as trainer_main
from swefleet.orchestrator.config import OrchestratorConfig
from swefleet.orchestrator.loop import RLLoop, RunAborted
from swefleet.trainer.config import TrainerConfig

from swefleet.batch import batch_path, pack_samples, write_batch
from swefleet.filewatch import FileWatch
from swefleet.rundir import RunDir
from swefleet.types import EpisodeStatus, Task, Trajectory, Turn

pytestmark = pytest.mark.integration
TASKS = [Task(instance_id=f"t{i}", repo="x/x", problem_statement="p") for i in range(3)]


def _recording(monkeypatch, module, backstop_s: float | None = None) -> list[FileWatch]:
    """Make `module` build FileWatches that are kept for inspection."""
    made: list[FileWatch] = []

    class Recording(FileWatch):
        def __init__(self, *args, **kw):
            super().__init__(*args, **kw)
            if backstop_s is not None:
                self.backstop_s = backstop_s
            made.append(self)

    monkeypatch.setattr(module, "FileWatch", Recording)
    return made


def test_trainer_picks_up_a_batch_written_while_it_waits(tmp_path, monkeypatch):
    watches = _recording(monkeypatch, trainer_main)
    cfg = TrainerConfig(batch_recheck_s=60.0, batch_timeout_s=20.0)
    path = batch_path(tmp_path / "batches", 0)
    path.parent.mkdir()
    sample = {"tokens": [1, 2, 3], "loss_mask": [False, True, True],
              "inference_logprobs": [0.0, -1.0, -1.0], "advantage": 1.0, "policy_version": 0}

    def write() -> None:
        time.sleep(0.3)
        write_batch(path, pack_samples([sample]), {"step": 0})  # temp file, then os.replace

    threading.Thread(target=write).start()
    t0 = time.monotonic()
    assert trainer_main.wait_for_batch(path, cfg, trainer_main.StopFlag())
    assert time.monotonic() - t0 < 15  # far below the 60 s backstop
    assert [w.found_by for w in watches] == ["event"]


def _rollout(state: dict):
    async def rollout(task, handle, group_id, sink):
        state["n"] = n = state.get("n", 0) + 1
        traj = Trajectory(episode_id=handle.episode_id, task_id=task.instance_id,
                          group_id=group_id)
        await asyncio.sleep(0.01)
        traj.turns = [Turn(prompt_ids=[1, 2], completion_ids=[3], logprobs=[-1.0],
                           policy_version=state["loop"].state.served_version)]
        traj.status, traj.reward = EpisodeStatus.unresolved, float(n % 2)
        sink(traj)
        return traj

    return rollout


async def _trainer(run_dir: RunDir, steps: int, die_after: int | None = None) -> None:
    """Waits for each batch with its own FileWatch and publishes weights by renaming a dir."""
    with FileWatch(backstop_s=60.0) as watch:
        for step in range(steps if die_after is None else die_after):
            assert await watch.wait_async(run_dir.batch_path(step), timeout_s=30)
            tmp = run_dir.weights / f".tmp-v{step + 1:06d}"
            tmp.mkdir()
            (tmp / "model.safetensors").write_bytes(np.zeros(8).tobytes())
            os.replace(tmp, run_dir.weights_path(step + 1))


async def test_orchestrator_serves_each_version_at_its_rename(tmp_path, monkeypatch):
    watches = _recording(monkeypatch, loop_mod, backstop_s=60.0)
    monkeypatch.setattr(loop_mod, "HEALTH_CHECK_S", 60.0)  # no timer can wake it in this test
    run_dir, state = RunDir(tmp_path), {}
    cfg = OrchestratorConfig(steps=4, groups_per_step=1, rollouts_per_task=2)
    served: list[int] = []

    async def update(version, path):
        served.append(version)

    loop = RLLoop(cfg, _rollout(state), TASKS, run_dir, update)
    state["loop"] = loop
    trainer = asyncio.create_task(_trainer(run_dir, cfg.steps))
    records = await asyncio.wait_for(loop.run(), 30)
    await trainer
    assert [r["step"] for r in records] == [0, 1, 2, 3] and served == [1, 2, 3, 4]
    (watch,) = watches
    assert watch.wakes["backstop"] == 0 and watch.found_by in ("event", "present")


async def test_a_dead_trainer_is_noticed_within_about_a_second(tmp_path):
    run_dir, state = RunDir(tmp_path), {}
    cfg = OrchestratorConfig(steps=4, groups_per_step=1, rollouts_per_task=2)

    async def update(version, path):
        pass

    trainer = asyncio.create_task(_trainer(run_dir, cfg.steps, die_after=1))
    loop = RLLoop(cfg, _rollout(state), TASKS, run_dir, update,
                  health=lambda: "trainer process exited with code 1" if trainer.done() else None)
    state["loop"] = loop
    run = asyncio.create_task(loop.run())
    await trainer
    died = time.monotonic()
    with pytest.raises(RunAborted, match="exited with code 1"):
        await asyncio.wait_for(run, 10)
    assert time.monotonic() - died < loop_mod.HEALTH_CHECK_S + 1.5
