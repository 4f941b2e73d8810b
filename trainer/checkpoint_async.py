"""Trainer checkpoints off the step path (`trainer.checkpoint_async`, on by default).

`AsyncCheckpointer.save` holds the step loop only to wait for the previous save (one save at a
time) and to copy the state into host memory (`dcp.async_save` with a blocking stager: on CUDA
pinned buffers kept from save to save, so the copy runs at PCIe speed; on CPU a fresh copy). The
pinned buffers are allocated after the first step (`warm`), not on the first checkpoint's step. A
worker thread then writes the copy (DCP: every rank its shard, over a gloo group of its own, so
the step's collectives never wait on it); rank 0 waits until the weights version of the same
step is durable (a resume from checkpoint n needs version n) and commits
(`checkpoint.commit_checkpoint`: marker, fsync, rename, retention). A checkpoint is complete
only once renamed: a kill during the write leaves its `.tmp-save` directory, removed at the next
start, and the previous checkpoint, which resume then loads.

A save that fails for a full disk is dropped with a warning (the previous checkpoint stays, the
run goes on); any other failure of the worker is raised by the next `save` or `wait`.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import torch
from swefleet.trainer import checkpoint as ckpt
from swefleet.trainer import titan

from swefleet.diskspace import is_disk_full

log = logging.getLogger(__name__)


def _dist():
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


class AsyncCheckpointer:
    """Checkpoints of one trainer into `directory`, the newest `keep` complete ones kept.
    Every rank makes one and calls `save`/`wait`/`close` at the same points of the loop.
    `background=False` writes on the step path (no host copy, no worker)."""

    def __init__(self, directory: str | Path, keep: int, *, background: bool = True,
                 pinned: bool = False) -> None:
        from torch.distributed.checkpoint.staging import BlockingAsyncStager

        dist = _dist()
        self.directory = Path(directory)
        self.keep = keep
        self.rank = dist.get_rank() if dist else 0
        # its own gloo group: DCP's collectives run in the worker thread, beside the step's
        self.group = dist.new_group(backend="gloo") if dist and background else None
        self.stager = BlockingAsyncStager(cache_staged_state_dict=pinned) if background else None
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="checkpoint") if background else None
        self.pending: Future | None = None
        self.blocking_s = 0.0
        """Seconds the step loop spent in `save` since the last `metrics` call."""
        self.background_s: float | None = None
        """Seconds the newest finished save took after `save` returned."""
        self.dropped = 0
        """Saves dropped for a full disk."""
        self.warm_s: float | None = None
        """Seconds `warm` took (pinning the staging buffers), once it ran."""
        self._warm_reported = False

    def save(self, policy: titan.Policy, optimizer: torch.optim.Optimizer, step: int,
             meta: dict | None = None, after: Iterable[Future] = ()) -> None:
        """Start checkpoint `step` (of the state as it is now); it is committed in the
        background once written and once every future of `after` is done."""
        import torch.distributed.checkpoint as dcp

        t0 = time.monotonic()
        self.wait()
        if self.rank == 0:
            ckpt.prepare_temp(self.directory, step)
        _barrier()
        state = ckpt.state_dict(policy, optimizer)
        tmp = str(ckpt.temp_path(self.directory, step))
        if self.pool is None:
            dcp.save(state, checkpoint_id=tmp)
            self._finish(None, step, meta, list(after), time.monotonic())
        else:
            write = dcp.async_save(state, checkpoint_id=tmp, process_group=self.group,
                                   async_stager=self.stager, no_dist=self.group is None)
            self.pending = self.pool.submit(self._finish, write, step, meta, list(after),
                                            time.monotonic())
        self.blocking_s += time.monotonic() - t0

    @property
    def stages_into_pinned_buffers(self) -> bool:
        """Whether saves copy into host buffers kept between saves (pinned on CUDA), which
        `warm` allocates ahead of the first save."""
        return self.stager is not None and self.stager.cache_staged_state_dict

    def warm(self, policy: titan.Policy, optimizer: torch.optim.Optimizer) -> None:
        """Allocate the pinned host buffers now (once; a stage into them, nothing written):
        the first checkpoint then only copies, instead of pinning gigabytes on its step."""
        if self.warm_s is not None or self.stager is None:
            return
        if not self.stager.cache_staged_state_dict:
            self.warm_s = 0.0
            return
        t0 = time.monotonic()
        self.wait()
        self.stager.stage(ckpt.state_dict(policy, optimizer))
        self.warm_s = time.monotonic() - t0
        log.info("checkpoint staging buffers pinned in %.2fs", self.warm_s)

    def _finish(self, write: Future | None, step: int, meta: dict | None,
                after: list[Future], started: float) -> None:
        try:
            if write is not None:
                write.result()
            for future in after:
                future.result()
            if self.rank == 0:
                log.info("checkpoint %s",
                         ckpt.commit_checkpoint(self.directory, step, self.keep, meta))
        except BaseException as e:  # DCP's CheckpointException is a BaseException
            if not is_disk_full(e):
                raise
            self.dropped += 1
            if self.rank == 0:
                shutil.rmtree(ckpt.temp_path(self.directory, step), ignore_errors=True)
            log.warning("disk full: the checkpoint of step %d was dropped (the previous one "
                        "stays, the run goes on)", step)
            return
        self.background_s = time.monotonic() - started

    def wait(self) -> None:
        """Until the save in progress (if any) is committed; raises its error."""
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.result()

    def metrics(self) -> dict[str, float]:
        """`checkpoint_blocking_s` since the previous call, `checkpoint_background_s` of the
        newest finished save (once there is one), `checkpoint_warm_s` (in the first call after
        `warm` ran)."""
        out = {"checkpoint_blocking_s": self.blocking_s}
        self.blocking_s = 0.0
        if self.warm_s is not None and not self._warm_reported:
            out["checkpoint_warm_s"] = self.warm_s
            self._warm_reported = True
        if self.background_s is not None:
            out["checkpoint_background_s"] = self.background_s
        return out

    def close(self) -> None:
        """Wait for the save in progress, then release the worker and the host buffers."""
        try:
            self.wait()
        finally:
            if self.pool is not None:
                self.pool.shutdown()
                self.stager.close()
                self.pool = None


def _barrier() -> None:
    dist = _dist()
    if dist is not None:
        dist.barrier()
