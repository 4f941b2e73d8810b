"""Where a killed run continues: the last batch handed over, the last weights published, and the
finished trajectories that no batch has used yet (none is lost, none is trained on twice). Only
the same run continues in a folder: its fingerprint is checked before (`swefleet/fingerprint.py`).

Files are the source of truth, and each is written atomically: `batches/step_N.npz` (its meta
lists the episode ids it holds), `weights/vN/` (renamed into place; served again only once
durable: `RunDir.reloadable_version`), `episodes.jsonl` (appended
and fsynced per episode; a torn last line is skipped), `drops.jsonl` (one line per drop, naming
the episodes it settled: the drop counters continue from it and those episodes are neither
counted nor batched again), `episodes.started.jsonl` (one line per episode as it starts: an
episode a killed run never finished is settled on resume as `cancelled`, so every episode
started is in `episodes.jsonl`, finished or dropped with a reason).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from swefleet.orchestrator.advantages import is_scored
from swefleet.orchestrator.metrics import rollouts_dropped

from swefleet.batch import read_batch
from swefleet.journal import Journal
from swefleet.rundir import RunDir, append_jsonl, newest_durable, read_jsonl, version_dirs
from swefleet.types import EpisodeStatus, Trajectory
from swefleet.weight_transfer import MARKER_SUFFIX


@dataclass
class ResumePoint:
    step: int = 0
    """Next batch to write."""
    version: int = 0
    """Latest policy version published by the trainer (served after the restart)."""
    pending: list[list[Trajectory]] = field(default_factory=list)
    """Finished groups not in any written batch nor settled by a drop, oldest first."""
    drops: dict[str, int] = field(default_factory=dict)
    """Drop counters so far, by reason (`drops.jsonl`)."""
    dropped_before: int = 0
    """Rollouts dropped as of the last step record (the next step's drops/step counts from it)."""

    @property
    def fresh(self) -> bool:
        return self.step == 0 and self.version == 0 and not self.pending


def finished(run_dir: RunDir, steps: int) -> bool:
    """The run in `run_dir` has nothing left to do for `steps` steps: every step's batch was
    handed over and policy v`steps` (or a later one) is a published checkpoint directory that
    survives a crash (`newest_durable`). Reads only: a restart of a finished run starts no
    server and no trainer, and changes nothing."""
    return (contiguous_count(lambda i: run_dir.batch_path(i).exists()) >= steps
            and newest_durable(run_dir.weights) >= steps)


def contiguous_count(exists) -> int:
    n = 0
    while exists(n):
        n += 1
    return n


STARTED = "episodes.started.jsonl"
UNFINISHED = "interrupted: the run stopped while the episode ran (settled when it resumed)"


def record_started(run_dir: RunDir, traj: Trajectory, journal: Journal | None = None) -> None:
    """Journal an episode as it starts (`settle_unfinished` reads it): through `journal` (off
    the event loop, before the episode's end record) or, without one, inline."""
    record = {"episode_id": traj.episode_id, "task_id": traj.task_id, "group_id": traj.group_id}
    if journal is not None:
        journal.append(run_dir.root / STARTED, record)
    else:
        append_jsonl(run_dir.root / STARTED, record)


def settle_unfinished(run_dir: RunDir) -> int:
    """Record every episode started but never finished (a killed run) as `cancelled` in
    `episodes.jsonl`; returns how many."""
    finished = {r.get("episode_id") for r in read_jsonl(run_dir.episodes)}
    n = 0
    for record in read_jsonl(run_dir.root / STARTED):
        if record.get("episode_id") in finished:
            continue
        finished.add(record["episode_id"])
        append_jsonl(run_dir.episodes, Trajectory(
            episode_id=record["episode_id"], task_id=record["task_id"],
            group_id=record.get("group_id", ""), status=EpisodeStatus.cancelled,
            reason=UNFINISHED))
        n += 1
    return n


def remove_torn_batches(run_dir: RunDir) -> list[str]:
    """Remove the temp files of batch writes a killed run left (`batches/.<name>.tmp-*`:
    `swefleet.rundir.write_atomic` writes there first); the orchestrator is the only writer of
    `batches/`, so at its start none is in progress. Returns the removed names."""
    removed = []
    for path in sorted(run_dir.batches.glob(".*.tmp-*")) if run_dir.batches.is_dir() else []:
        path.unlink(missing_ok=True)
        removed.append(path.name)
    return removed


def find_resume_point(run_dir: RunDir) -> ResumePoint:
    steps = contiguous_count(lambda i: run_dir.batch_path(i).exists())
    # broadcast versions are gone with the servers; a version not yet durable may be torn
    version = run_dir.reloadable_version(_newest_published(run_dir))
    consumed: set[str] = set()
    for i in range(steps):
        _, meta = read_batch(run_dir.batch_path(i))
        consumed.update(meta.get("episode_ids", []))
    at_last_step = _drops_as_of(run_dir, steps)
    drops: dict[str, int] = defaultdict(int)
    for record in read_jsonl(run_dir.drops):
        drops[record["reason"]] += record["n"]
        consumed.update(record["episode_ids"])
    if not run_dir.drops.exists():  # a run dir written before drops.jsonl existed
        drops.update(at_last_step)
    groups: dict[str, list[Trajectory]] = defaultdict(list)
    for record in read_jsonl(run_dir.episodes):
        traj = Trajectory.model_validate(record)
        if traj.episode_id not in consumed:
            groups[traj.group_id or traj.episode_id].append(traj)
    pending = [g for g in groups.values() if any(is_scored(t) for t in g)]
    return ResumePoint(step=steps, version=version, pending=pending, drops=dict(drops),
                       dropped_before=rollouts_dropped(at_last_step))


def _newest_published(run_dir: RunDir) -> int:
    """The newest version published as a directory or a broadcast marker (0: none). Not a
    count from v1: retention deletes the oldest directories."""
    markers = (int(m.name[1:].removesuffix(MARKER_SUFFIX))
               for m in run_dir.weights.glob(f"v*{MARKER_SUFFIX}"))
    return max([*version_dirs(run_dir.weights), *markers], default=0)


def _drops_as_of(run_dir: RunDir, steps: int) -> dict[str, int]:
    """The drop counters of the last step record written before the restart."""
    records = [r for r in read_jsonl(run_dir.metrics) if r.get("step", steps) < steps]
    if not records:
        return {}
    return {k.split("/", 1)[1]: v for k, v in records[-1].items()
            if k.startswith("drops/") and k != "drops/step"}
