"""The trainer's writes that need disk, as the step loop sees them: the room check before each
weights export (`trainer/disk_guard.py`) and the checkpoints every `trainer.checkpoint_every`
steps and at the end (`trainer/checkpoint_async.py`), with their metrics."""

from __future__ import annotations

import threading
from pathlib import Path

import torch
from swefleet.trainer import titan
from swefleet.trainer.checkpoint_async import AsyncCheckpointer
from swefleet.trainer.config import TrainerJob, checkpoint_dir
from swefleet.trainer.disk_guard import DiskGuard

from swefleet.batch import weights_path


def weights_bytes(policy: titan.Policy) -> int:
    """Bytes of the tensors of one published version (the source checkpoint's dtype)."""
    count = sum(shape.numel() for shape in titan.hf_shapes(policy).values())
    return count * policy.source_dtype.itemsize


def checkpoint_bytes(policy: titan.Policy) -> int:
    """Bytes of one checkpoint: the master weights and AdamW's two moments (3 x the
    parameters' bytes; a DTensor counts its global size)."""
    return 3 * sum(p.numel() * p.element_size() for p in policy.model.parameters())


class Saves:
    """Every rank makes one after loading the model (collectives when there are several)."""

    def __init__(self, job: TrainerJob, policy: titan.Policy, world: int, device: str,
                 step: int) -> None:
        cfg = job.trainer
        self.job = job
        self.guard = DiskGuard(cfg.disk_min_free_gb, world)
        self.directory = checkpoint_dir(job)
        self.checkpointer = None
        if cfg.checkpoint_every:
            self.checkpointer = AsyncCheckpointer(self.directory, cfg.keep_checkpoints,
                                                  background=cfg.checkpoint_async,
                                                  pinned=device == "cuda")
        self.weights_bytes = weights_bytes(policy)
        self.checkpoint_bytes = checkpoint_bytes(policy)
        self.saved = step
        """The step of the newest checkpoint (started), or where the trainer started."""

    def room_to_publish(self, version: int, broadcaster, stop: threading.Event) -> bool:
        """Until the disk has room for version `version` (True), or False when told to stop
        while waiting for it."""
        out = weights_path(self.job.weights_dir, version)
        as_dir = broadcaster is None or broadcaster.exports(version)
        need = self.weights_bytes if as_dir and not out.exists() else 0
        return self.guard.wait_for_room(self.job.weights_dir, need,
                                        f"the export of {out.name}", stop)

    def after_step(self, policy: titan.Policy, optimizer: torch.optim.Optimizer, step: int,
                   exporter) -> None:
        """Checkpoint version `step + 1` when `checkpoint_every` says so; after the first step
        (the optimizer's state now exists), allocate the host buffers checkpoints are staged
        into, so that no checkpoint step pays for them."""
        every = self.job.trainer.checkpoint_every
        if every and (step + 1) % every == 0:
            self.checkpoint(policy, optimizer, step + 1, exporter)
        elif self.checkpointer is not None:
            self.checkpointer.warm(policy, optimizer)

    def warm_early(self, policy: titan.Policy, optimizer: torch.optim.Optimizer) -> None:
        """Before the first step, while the trainer waits for its first batch: allocate the
        checkpoints' pinned host buffers (seconds for gigabytes) off the step path. A fresh
        AdamW's state is made first (`trainer/optim_state.py`); for any other optimizer
        without state the buffers wait until after the first step (`after_step`)."""
        if self.checkpointer is None or not self.checkpointer.stages_into_pinned_buffers:
            return
        from swefleet.trainer.optim_state import prime_adam_state

        if optimizer.state or prime_adam_state(optimizer):
            self.checkpointer.warm(policy, optimizer)

    def checkpoint(self, policy: titan.Policy, optimizer: torch.optim.Optimizer, step: int,
                   exporter) -> None:
        """Start checkpoint `step` (committed once the versions `exporter` published are
        durable: a checkpoint of step n implies version n durable), unless the disk is low."""
        if not self.guard.room(self.directory, self.checkpoint_bytes,
                               f"the checkpoint of step {step}"):
            return
        meta = {"model": str(self.job.model), "start_version": self.job.start_version}
        self.checkpointer.save(policy, optimizer, step, meta, after=exporter.pending())
        self.saved = step

    def metrics(self) -> dict[str, float | int]:
        """`disk_free_gb`, `disk_paused_saves` (skips, pauses and saves dropped for a full
        disk), `checkpoint_blocking_s`, `checkpoint_background_s`."""
        out = self.guard.metrics(Path(self.job.weights_dir))
        if self.checkpointer is not None:
            out.update(self.checkpointer.metrics())
            out["disk_paused_saves"] += self.checkpointer.dropped
        return out

    def close(self, policy: titan.Policy, optimizer: torch.optim.Optimizer, step: int,
              exporter) -> None:
        """Stopping at `step`: checkpoint the progress since the last one, then wait until it
        is committed."""
        if self.checkpointer is None:
            return
        try:
            if self.saved != step:
                self.checkpoint(policy, optimizer, step, exporter)
        finally:
            self.checkpointer.close()

    def abandon(self, exporter) -> None:
        """Stopped before publishing a trained step (paused for disk): no final checkpoint and
        no export (the state is a version ahead of the published ones; a restart trains that
        step again); wait for the writes in flight."""
        try:
            exporter.close()
        finally:
            if self.checkpointer is not None:
                self.checkpointer.close()
