"""How `swefleet replay` brings a fresh sandbox to an episode's turn K: by replaying the
recorded actions (`--via replay`, the default), or from a snapshot (`--via snapshot`: taken
after the first replay of that turn, kept in the run's cache unless `--no-keep`;
`swefleet.app.replay_snapshot`).

    restorer = Restorer(run, traj, turn, via="snapshot", keep=True, backend="docker")
    async with farm.acquire(restorer.task_for(task)) as sb:
        seconds = await restorer(sb, make_scaffold(run.config.agent))
    restorer.finish()  # removes the snapshot when it is not kept
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from dataclasses import dataclass, field
from typing import Any

from swefleet.app.replay_run import ReplayRun
from swefleet.types import Task, Trajectory

log = logging.getLogger(__name__)


@dataclass
class Restorer:
    """Restores one episode at one turn; afterwards says how (`record`)."""

    run: ReplayRun
    traj: Trajectory
    turn: int
    via: str
    """`replay` or `snapshot`."""
    keep: bool
    """Keep the snapshot this command used or made (`--via snapshot` without `--no-keep`)."""
    backend: str
    steps: list = field(default_factory=list)
    """The replayed turns (`agents.replay.ReplayedTurn`); empty when restored from a snapshot."""
    from_snapshot: bool = False
    snapshot_bytes: int | None = None
    """What the snapshot adds on disk (the committed layer; the copied directories)."""
    snapshot_s: float = 0.0
    """Seconds spent taking the snapshot (not part of the restore)."""

    def __post_init__(self) -> None:
        from swefleet.app import replay_snapshot as snap

        self.key = snap.snapshot_key(self.run.root, self.traj.episode_id, self.turn)
        if self.via == "snapshot" and self.backend == "docker" and self.run.config.envs.hosts:
            raise ValueError("--via snapshot: snapshots are local; the run's sandboxes are on "
                             "remote Docker hosts (envs.hosts): use --via replay")
        if self.via == "snapshot":
            self.from_snapshot = self._have()

    def _have(self) -> bool:
        from swefleet.app import replay_snapshot as snap

        if self.backend == "docker":
            return snap.docker_has(snap.docker_tag(self.key))
        return snap.bwrap_dir(self.run.root, self.key).is_dir()

    def task_for(self, task: Task) -> Task:
        """The task whose sandbox to acquire: on Docker with a snapshot, its image."""
        from swefleet.app import replay_snapshot as snap

        self.task_image = task.image
        if self.from_snapshot and self.backend == "docker":
            return task.model_copy(update={"image": snap.docker_tag(self.key)})
        return task

    async def __call__(self, sb: Any, scaffold: Any) -> float:
        """Bring `sb` to the state after the turn; the seconds it took (snapshot taking not
        included)."""
        from swefleet.agents.replay import replay_turns
        from swefleet.app import replay_snapshot as snap

        t0 = time.monotonic()
        if self.from_snapshot:
            if self.backend == "bwrap":
                await asyncio.to_thread(snap.bwrap_load, sb.box, snap.bwrap_dir(self.run.root,
                                                                                  self.key))
            return time.monotonic() - t0
        agent = self.run.config.agent
        self.steps = await replay_turns(sb, scaffold, self.traj.turns, self.turn,
                                        agent.scaffold, agent.command_timeout_s)
        seconds = time.monotonic() - t0
        if self.via == "snapshot":
            t1 = time.monotonic()
            self.snapshot_bytes = await asyncio.to_thread(self._take, sb)
            self.snapshot_s = time.monotonic() - t1
        return seconds

    def _take(self, sb: Any) -> int:
        from swefleet.app import replay_snapshot as snap

        if self.backend == "docker":
            return snap.docker_commit(sb.container_id, snap.docker_tag(self.key), self.run.root,
                                      self.task_image)
        return snap.bwrap_save(sb.box, snap.bwrap_dir(self.run.root, self.key))

    def finish(self) -> None:
        """Remove the snapshot unless it is kept (after the sandbox is gone)."""
        from swefleet.app import replay_snapshot as snap

        if self.via != "snapshot" or self.keep:
            return
        if self.backend == "docker":
            if snap.docker_has(snap.docker_tag(self.key)):
                snap.docker_remove(snap.docker_tag(self.key))
        else:
            shutil.rmtree(snap.bwrap_dir(self.run.root, self.key), ignore_errors=True)

    def how(self) -> str:
        if self.from_snapshot:
            return "from its snapshot"
        return f"{len(self.steps)} actions replayed, " \
               f"{sum(s.matches for s in self.steps)} observations match the record"

    def record(self) -> dict:
        """The restore's fields of `--json` and of a continuation's record."""
        return {"via": self.via, "from_snapshot": self.from_snapshot,
                "snapshot": self.key if self.via == "snapshot" else None,
                "snapshot_bytes": self.snapshot_bytes, "snapshot_s": self.snapshot_s,
                "snapshot_kept": self.via == "snapshot" and self.keep}


def drop_snapshots(run: ReplayRun) -> int:
    """Remove every snapshot of the run (both backends); how many."""
    from swefleet.app import replay_snapshot as snap

    n = 0
    for path in snap.bwrap_run_snapshots(run.root):
        shutil.rmtree(path)
        n += 1
    import docker.errors

    try:
        tags = snap.docker_run_snapshots(run.root)
    except docker.errors.DockerException as e:  # no Docker engine: no Docker snapshots
        log.info("no Docker snapshots looked for: %s: %s", type(e).__name__, e)
        tags = []
    for tag in tags:
        snap.docker_remove(tag)
        n += 1
    return n
