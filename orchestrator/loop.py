"""The async RL loop: rollouts and updates overlap; no single outlier holds a batch.

Components (each single-purpose, talking through bounded queues and one shared version):
- producer: starts groups of `rollouts_per_task` episodes while fewer than
  `(async_level + 1) * groups_per_step` groups are in flight or waiting;
- rollouts: each episode is its own task with a deadline (agent config) and a fault boundary;
- weight watcher: serves each new trainer checkpoint to the fleet and drops stale episodes;
- step loop: cuts a batch from whichever groups finished, drops stale rollouts, writes the
  batch file atomically for the trainer process.

No file is written on the event loop: records (episodes, drops, metrics) go to a `Journal`
(one writer thread, in order, fsynced; a group is batched only once its episodes are durable)
and batches are packed and written in a worker thread. `inline_writes=True` keeps the old,
blocking path (the baseline of `benchmarks/event_loop.py`).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import time
import uuid
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from swefleet.orchestrator.advantages import batch_samples, is_zero_variance
from swefleet.orchestrator.config import OrchestratorConfig
from swefleet.orchestrator.metrics import cost_metrics, rollout_metrics, rollouts_dropped
from swefleet.orchestrator.resume import ResumePoint
from swefleet.orchestrator.retention import prune_weights
from swefleet.orchestrator.rollout import RolloutFn, RolloutHandle
from swefleet.orchestrator.trainer_proc import trainer_disk_pause

from swefleet.batch import pack_samples, write_batch
from swefleet.filewatch import FileWatch
from swefleet.journal import Journal
from swefleet.rundir import RunDir, append_jsonl
from swefleet.types import EpisodeStatus, Task, Trajectory

if TYPE_CHECKING:
    from swefleet.orchestrator.branching import BranchPoint

log = logging.getLogger(__name__)

BranchPointFn = Callable[[Task, str], Awaitable["BranchPoint | None"]]
"""(task, group id) -> where the group's episodes start: `orchestrator.branching.Brancher.point`."""

CANCELLED_AT_RUN_END = ("cancelled at run end (not scored): started for a batch after the last "
                        "step")
"""The reason of an episode still running when the last step is done (async_level > 0 starts
groups for the steps ahead); it is masked, as every cancelled episode is."""
CANCELLED_AT_STOP = ("cancelled (not scored): the run stopped before its last step "
                     "(interrupted or failed)")
"""The reason of an episode still running when a run is interrupted or fails."""

HEALTH_CHECK_S = 1.0
"""While waiting for the trainer's next weights: how often to ask whether it is still alive
(also the backstop re-check of the weights file where no inotify event comes)."""


class RunAborted(RuntimeError):
    """The run cannot make progress (e.g. N empty batches in a row)."""


@dataclass
class LoopState:
    served_version: int = 0
    drops: dict[str, int] = field(default_factory=dict)
    in_flight: dict[str, RolloutHandle] = field(default_factory=dict)
    tasks: dict[str, asyncio.Task] = field(default_factory=dict)


class RLLoop:
    def __init__(
        self,
        cfg: OrchestratorConfig,
        rollout: RolloutFn,
        tasks: list[Task],
        run_dir: RunDir,
        update_weights: Callable[[int, Path], object],
        on_step: Callable[[dict], None] | None = None,
        health: Callable[[], str | None] | None = None,
        resume: ResumePoint | None = None,
        extra_metrics: Callable[[], dict] | None = None,
        journal: Journal | None = None,
        inline_writes: bool = False,
        branch_points: BranchPointFn | None = None,
    ) -> None:
        self.cfg, self.rollout, self.tasks, self.run_dir = cfg, rollout, tasks, run_dir
        self.update_weights = update_weights
        self.on_step = on_step or (lambda record: None)
        self.health = health or (lambda: None)
        """Returns an error message when a process the loop depends on (the trainer) died."""
        self.extra_metrics = extra_metrics or (dict)
        """Namespaced scalars from other components (fleet, trainer), merged into each step."""
        self.resume = resume or ResumePoint()
        self.state = LoopState(served_version=self.resume.version,
                               drops=dict(self.resume.drops))
        self.ready: asyncio.Queue[list[Trajectory]] = asyncio.Queue()
        max_groups = (cfg.async_level + 1) * cfg.groups_per_step
        self.group_slots = asyncio.Semaphore(max_groups)
        self.episode_slots = asyncio.Semaphore(cfg.max_concurrent_episodes)
        self.version_changed = asyncio.Condition()
        """Notified when the served version changes or groups are discarded (`_discard`)."""
        self.discarded_groups = 0
        """Groups taken for a batch that trained on none of them (all stale, or the batch was
        empty and re-cut): the producer starts that many more for the same step."""
        self.rng = random.Random(cfg.seed)
        self.started_at = time.monotonic()
        self.groups: set[asyncio.Task] = set()
        self.failed: asyncio.Future | None = None
        """Set (by `run`) to the error of a group whose rollout raised: fails the run."""
        self.last_weight_sync_s = 0.0
        self._dropped_before = self.resume.dropped_before
        self.journal = journal
        """Writes the run's records off the loop (the loop makes and closes one if None)."""
        self._own_journal = journal is None
        self.inline_writes = inline_writes
        """Write records and batches on the event loop (blocking; the benchmark baseline)."""
        self._acks: dict[str, Future] = {}
        """Episode id -> the future of its record (resolved once it is durable)."""
        self.branch_points = branch_points
        """Where each group's episodes start (`orchestrator/branching.py`); None: fresh."""

    async def _off_loop(self, fn, *args):
        """`fn(*args)` in a worker thread (inline on the loop with `inline_writes`)."""
        return fn(*args) if self.inline_writes else await asyncio.to_thread(fn, *args)

    def _append(self, path: Path, record) -> Future | None:
        """Append a record to a run file: handed to the journal (in order; the future resolves
        once it is durable), or inline (`inline_writes`, or after `run` has ended or the journal
        was closed under it: an episode that ends during a shutdown is still saved)."""
        if self.inline_writes or self.journal is None or self.journal.closed:
            append_jsonl(path, record)
            return None
        return self.journal.append(path, record)

    # ---------------------------------------------------------------- producer
    async def _produce(self) -> None:
        order: list[Task] = []
        started = 0
        while True:
            await self.group_slots.acquire()
            # never run more than async_level versions ahead of the policy that will train on
            # the group (a discarded group's replacement feeds the same step)
            async with self.version_changed:
                await self.version_changed.wait_for(functools.partial(self._startable, started))
            if self.state.served_version >= self.cfg.steps:
                # every batch is trained on: a group started now could only be cancelled
                await asyncio.get_running_loop().create_future()  # until `run` ends
            started += 1
            if not order:
                order = self.rng.sample(self.tasks, len(self.tasks))
            group = asyncio.create_task(self._run_group(order.pop()))
            self.groups.add(group)
            group.add_done_callback(self._group_done)

    def _startable(self, started: int) -> bool:
        """Whether the next group (after `started` others) may start: the step it will feed is
        at most async_level ahead of the served version."""
        feeds_step = (self.resume.step
                      + (started - self.discarded_groups) // self.cfg.groups_per_step)
        return self.state.served_version >= feeds_step - self.cfg.async_level

    async def _discard(self, n: int) -> None:
        """`n` groups taken for a batch fed none: their replacements feed the same step."""
        async with self.version_changed:
            self.discarded_groups += n
            self.version_changed.notify_all()

    def _group_done(self, group: asyncio.Task) -> None:
        self.groups.discard(group)
        if not group.cancelled() and group.exception() and not self.failed.done():
            self.failed.set_exception(group.exception())  # fails the run (see `run`)

    async def _run_group(self, task: Task) -> None:
        group_id = f"{task.instance_id}-{uuid.uuid4().hex[:8]}"
        branch = await self._branch_point(task, group_id)
        handles = [RolloutHandle(uuid.uuid4().hex[:12], self.state.served_version, branch=branch)
                   for _ in range(self.cfg.rollouts_per_task)]
        runs = [asyncio.create_task(self._run_episode(task, group_id, h)) for h in handles]
        try:
            await self._await_group(runs, handles)
        finally:
            for r in runs:
                r.cancel()
        for r in runs:
            if not r.cancelled() and r.exception() is not None:
                e = r.exception()
                raise RunAborted(f"a rollout of {task.instance_id} raised {type(e).__name__}: {e} "
                                 "(a rollout records its errors in the trajectory; it must not "
                                 "raise)") from e
        group = [r.result() for r in runs if not r.cancelled() and r.result() is not None]
        acks = [self._acks.pop(h.episode_id, None) for h in handles]
        await asyncio.gather(*(asyncio.wrap_future(a) for a in acks if a is not None))
        await self.ready.put(group)  # only episodes already on disk are ever batched

    async def _branch_point(self, task: Task, group_id: str) -> BranchPoint | None:
        """The group's shared prefix, found (a live parent run) in one episode slot."""
        if self.branch_points is None:
            return None
        async with self.episode_slots:
            return await self.branch_points(task, group_id)

    async def _await_group(self, runs: list[asyncio.Task], handles: list[RolloutHandle]) -> None:
        """Wait for the group; once half of it has finished, a member still running after
        `straggler_grace` x the slowest finished member's duration (each timed from its own
        start) is cut: cancelled, masked, counted. A member being graded is never cut."""
        grace = self.cfg.straggler_grace
        pending, slowest = set(runs), 0.0
        quorum = (len(runs) + 1) // 2
        by_run = dict(zip(runs, handles))
        while pending:
            cut_at = {}
            if grace is not None and len(runs) - len(pending) >= quorum:
                cut_at = {r: by_run[r].started_at + grace * slowest for r in pending
                          if by_run[r].started_at is not None and by_run[r].drop_reason is None
                          and not by_run[r].grading}
            timeout = max(0.0, min(cut_at.values()) - time.monotonic()) if cut_at else None
            done, pending = await asyncio.wait(pending, timeout=timeout,
                                               return_when=asyncio.FIRST_COMPLETED)
            for r in done:
                h = by_run[r]
                if h.started_at is not None and h.drop_reason is None:
                    slowest = max(slowest, time.monotonic() - h.started_at)
            now = time.monotonic()
            for r in [r for r in pending if r in cut_at and cut_at[r] <= now]:
                h = by_run[r]
                if h.grading:  # its agent ended since the deadline was set
                    continue
                h.drop_reason = EpisodeStatus.cancelled
                h.drop_note = f"straggler cut after {now - h.started_at:.1f}s"
                self._count_drop("straggler", [h.episode_id])
                r.cancel()

    async def _run_episode(self, task: Task, group_id: str,
                           handle: RolloutHandle) -> Trajectory | None:
        async with self.episode_slots:
            if handle.drop_reason is not None:
                return None
            handle.start_version = self.state.served_version
            handle.started_at = time.monotonic()
            self.state.in_flight[handle.episode_id] = handle
            self.state.tasks[handle.episode_id] = asyncio.current_task()
            try:
                return await self.rollout(task, handle, group_id,
                                          functools.partial(self._record, handle=handle))
            except asyncio.CancelledError:
                me = asyncio.current_task()
                if handle.drop_reason is None or me.cancelling() > 1:
                    raise
                me.uncancel()  # the scheduler's own drop: typed and recorded, the run goes on
                return None
            finally:
                self.state.in_flight.pop(handle.episode_id, None)
                self.state.tasks.pop(handle.episode_id, None)

    def _record(self, traj: Trajectory, handle: RolloutHandle) -> None:
        if handle.drop_reason is not None and traj.status == EpisodeStatus.cancelled:
            traj.status, traj.reward = handle.drop_reason, None
            traj.reason = handle.drop_note or traj.reason
        ack = self._append(self.run_dir.episodes, traj)
        if ack is not None:
            self._acks[handle.episode_id] = ack

    # ---------------------------------------------------------------- weights
    async def _watch_weights(self) -> None:
        with FileWatch(backstop_s=HEALTH_CHECK_S) as watch:
            while True:
                version = self.state.served_version + 1
                await self._await_published(watch, version)
                await self._serve(version, self.run_dir.weights_path(version))

    async def _await_published(self, watch: FileWatch, version: int) -> None:
        """Until the trainer renames `version` into place: woken by that rename (inotify), not
        by a timer. Every HEALTH_CHECK_S meanwhile the trainer's health is checked (a dead one
        fails the run) and where to look is asked again (`RunDir.weights_path`)."""
        while not await watch.wait_async(self.run_dir.weights_path(version),
                                         timeout_s=HEALTH_CHECK_S):
            # the trainer exits (code 0) once it has published the last version
            problem = self.health() if self.state.served_version < self.cfg.steps else None
            if problem and not self.run_dir.weights_path(version).exists():  # not published
                raise RunAborted(problem)  # just before the trainer exited

    async def _serve(self, version: int, path: Path) -> None:
        t0 = time.monotonic()
        await self.update_weights(version, path)
        async with self.version_changed:
            self.state.served_version += 1
            self.version_changed.notify_all()
        self.last_weight_sync_s = time.monotonic() - t0
        self._append(self.run_dir.root / "weights.jsonl", {
            "version": self.state.served_version,
            "served_at_s": time.monotonic() - self.started_at,
            "sync_s": self.last_weight_sync_s,
        })
        log.info("serving policy v%d (sync %.2fs)", self.state.served_version,
                 self.last_weight_sync_s)
        self._drop_stale_in_flight()
        await asyncio.to_thread(prune_weights, self.run_dir.weights, self.state.served_version,
                                self.cfg.keep_weights, self.cfg.keep_weights_every)

    def _drop_stale_in_flight(self) -> None:
        limit = self.state.served_version - self.cfg.max_off_policy_steps
        for eid, handle in list(self.state.in_flight.items()):
            if handle.start_version < limit and handle.drop_reason is None:
                handle.drop_reason = EpisodeStatus.dropped_stale
                self._count_drop("stale_in_flight", [eid])
                self.state.tasks[eid].cancel()

    async def _wait_version(self, version: int, timeout_s: float | None) -> None:
        # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation that races
        # with the condition coming true, and a swallowed cancel hangs shutdown
        async with asyncio.timeout(timeout_s), self.version_changed:
            await self.version_changed.wait_for(lambda: self.state.served_version >= version)

    async def _wait_weights(self, version: int) -> None:
        try:
            await self._wait_version(version, self.cfg.weights_timeout_s)
        except TimeoutError:
            pause = trainer_disk_pause(self.run_dir)
            raise RunAborted(
                f"the trainer published no policy v{version} within weights_timeout_s="
                f"{self.cfg.weights_timeout_s:g}s "
                + (f"because its export waits for disk space ({pause})" if pause
                   else "(see logs/trainer.log)")) from None

    def _count_drop(self, reason: str, episode_ids: list[str], n: int | None = None) -> None:
        """Count `n` drops (default: one per episode) and record them in the run dir with the
        episodes they settle: a resumed run starts from these counts and never counts (or
        batches) those episodes again."""
        n = len(episode_ids) if n is None else n
        self.state.drops[reason] = self.state.drops.get(reason, 0) + n
        self._append(self.run_dir.drops, {"reason": reason, "n": n, "episode_ids": episode_ids})

    # ---------------------------------------------------------------- steps
    async def _collect(self, step: int) -> tuple[list[list[Trajectory]], list[Trajectory], float]:
        """Take finished groups (whichever finish first) until the batch is full; also the
        episodes of the zero-variance groups set aside for new ones on the way
        (`resample_zero_variance_groups`), which count in the step's figures only."""
        t0 = time.monotonic()
        groups: list[list[Trajectory]] = []
        set_aside: list[Trajectory] = []
        resampled = 0
        while len(groups) < self.cfg.groups_per_step:
            if self.resume.pending:  # finished before a restart, not yet trained on
                group = self.resume.pending.pop(0)
            else:
                group = await self.ready.get()
                self.group_slots.release()
            stale = [self._is_stale(t, step) for t in group]
            fresh = [t for t, old in zip(group, stale) if not old]
            if any(stale):
                self._count_drop("stale_in_queue",
                                 [t.episode_id for t, old in zip(group, stale) if old])
            resample = (bool(fresh) and is_zero_variance(fresh)
                        and resampled < self.cfg.resample_zero_variance_groups)
            if resample:
                resampled += 1
                set_aside += fresh
                self._count_drop("zero_variance_resampled", [t.episode_id for t in fresh])
            if fresh and not resample:
                groups.append(fresh)
            else:
                await self._discard(1)
        return groups, set_aside, time.monotonic() - t0

    def _is_stale(self, traj: Trajectory, step: int) -> bool:
        if traj.status == EpisodeStatus.dropped_stale or not traj.policy_versions:
            return traj.status == EpisodeStatus.dropped_stale
        return step - min(traj.policy_versions) > self.cfg.max_off_policy_steps

    async def run(self) -> list[dict]:
        """Run all steps; a failed component (producer, weight watcher) fails the run loudly."""
        self.failed = asyncio.get_running_loop().create_future()
        if self.journal is None and not self.inline_writes:
            self.journal = Journal()
        components = [asyncio.create_task(self._produce(), name="producer"),
                      asyncio.create_task(self._watch_weights(), name="weight-watcher")]
        steps = asyncio.create_task(self._steps(), name="steps")
        try:
            done, _ = await asyncio.wait([steps, *components, self.failed],
                                         return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                if t is not steps:
                    t.result()  # re-raises the component's error
                    raise RunAborted(f"component {t.get_name()} stopped unexpectedly")
            return steps.result()
        finally:
            ended = steps.done() and not steps.cancelled() and steps.exception() is None
            for t in [steps, *components]:
                t.cancel()
            self.failed.cancel()
            await _settle([steps, *components])
            await self._cancel_in_flight(CANCELLED_AT_RUN_END if ended else CANCELLED_AT_STOP)
            if self.journal is not None:
                await self.journal.flush()  # every record handed over is on disk
                if self._own_journal:
                    self.journal.close()
                    self.journal = None

    async def _steps(self) -> list[dict]:
        records: list[dict] = []
        empty_in_a_row = 0
        last = time.monotonic()
        step = self.resume.step
        while step < self.cfg.steps:
            await self._wait_weights(step - self.cfg.async_level)
            groups, set_aside, wait_s = await self._collect(step)
            trajs = [t for g in groups for t in g]
            samples = await self._off_loop(batch_samples, groups,
                                           self.cfg.drop_zero_variance_groups)  # decodes routing
            if not samples:  # nothing trainable: not handed to the trainer, the step is re-cut
                empty_in_a_row += 1
                self._count_drop("empty_batch", [t.episode_id for t in trajs], n=1)
                await self._discard(len(groups))
                if empty_in_a_row >= self.cfg.max_empty_batches:
                    raise RunAborted(
                        f"{empty_in_a_row} batches in a row had no trainable sample: every "
                        "episode was masked (infra errors, timeouts, stale or zero-variance "
                        "groups). Check logs/ and episodes.jsonl."
                    )
                continue
            empty_in_a_row = 0
            meta = {"step": step, "n_samples": len(samples),
                    "episode_ids": [t.episode_id for t in trajs]}
            if self.journal is not None:  # the drops this batch settles are on disk first
                await self.journal.flush()
            await self._off_loop(_pack_and_write, self.run_dir.batch_path(step), samples, meta)
            now = time.monotonic()
            record = self._step_record(step, trajs + set_aside, len(samples), wait_s, now - last)
            last = now
            self._append(self.run_dir.metrics, record)
            records.append(record)
            self.on_step(record)
            step += 1
        await self._wait_weights(self.cfg.steps)
        return records

    def _step_record(self, step: int, trajs: list[Trajectory], n_samples: int, wait_s: float,
                     step_time_s: float) -> dict:
        cfg = self.cfg
        record = {
            "step": step,
            "time/step_s": step_time_s,
            "time/wait_for_data_s": wait_s,
            "time/weight_sync_s": self.last_weight_sync_s,
            "time/since_start_s": time.monotonic() - self.started_at,
            "infer/served_version": self.state.served_version,
            "batch/samples": n_samples,
            **{f"drops/{k}": v for k, v in self.state.drops.items()},
            **self._drop_rate(len(trajs)),
            **rollout_metrics(trajs, step),
            **cost_metrics(step_time_s, len(trajs), cfg.gpu_hour_price, cfg.n_gpus, cfg.currency),
            **self.extra_metrics(),
        }
        return record

    def _drop_rate(self, consumed: int) -> dict:
        """Rollouts dropped since the previous step (stale, straggler; not empty batches) over
        those dropped plus those consumed by this step's batch."""
        dropped_total = rollouts_dropped(self.state.drops)
        dropped = dropped_total - self._dropped_before
        self._dropped_before = dropped_total
        return {"drops/step": dropped,
                "rollout/drop_rate": dropped / (dropped + consumed) if dropped + consumed else 0.0}

    async def _cancel_in_flight(self, reason: str) -> None:
        """Cancel every group and episode; the episodes that started are recorded as
        `cancelled` with `reason` (those still waiting for a slot never started)."""
        for handle in self.state.in_flight.values():
            if handle.drop_reason is None:
                handle.drop_reason, handle.drop_note = EpisodeStatus.cancelled, reason
        pending = list(self.groups) + list(self.state.tasks.values())
        for t in pending:
            t.cancel()
        await _settle(pending)


def _pack_and_write(path: Path, samples: list, meta: dict) -> None:
    write_batch(path, pack_samples(samples), meta)


async def _settle(tasks: list[asyncio.Task], timeout_s: float = 60.0) -> None:
    """Wait for cancelled tasks to finish, but never hang shutdown on one that does not."""
    if not tasks:
        return
    _, stuck = await asyncio.wait(tasks, timeout=timeout_s)
    for t in stuck:
        log.error("task %s did not finish %.0fs after cancellation; leaving it", t.get_name(),
                  timeout_s)
