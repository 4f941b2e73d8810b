"""Publish policy versions in memory (`inference.weight_sync = "shared_memory"`; the buffer:
`swefleet/shared_weights.py`).

Rank 0 allocates one flat buffer for every HF tensor at the first publish (on the trainer's
GPU, shared by CUDA IPC; on CPU a shared-memory file), then for each version: waits until the
servers confirmed the previous one (`weights/vNNNNNN.loaded`, written by the fleet client once
every server copied it), copies the new weights into the buffer (device to device), waits for
the copies, and writes the marker `weights/vNNNNNN.nccl.json` with the buffer's handle. Nothing
touches the filesystem but the two small files. Versions the broadcaster `exports` (resume
checkpoints, the last one) are directories as with a broadcast.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from swefleet.trainer.weight_broadcast import WeightBroadcaster, hf_tensors, update_info

from swefleet.rundir import write_text_atomic
from swefleet.weight_transfer import BroadcastMarker, SharedBuffer, ack_path, marker_path

log = logging.getLogger("trainer")


class AckTimeout(RuntimeError):
    """The servers did not take the previous version in time: the buffer cannot be reused."""


class WeightSharer(WeightBroadcaster):
    """`WeightBroadcaster` whose versions go through a shared buffer instead of a group."""

    def __init__(self, weights_dir: Path, rank: int, *, ack_timeout_s: float,
                 export_every: int | None = None, last_version: int | None = None,
                 published_through: int = 0) -> None:
        super().__init__(None, 0, weights_dir, rank, export_every=export_every,  # type: ignore[arg-type]
                         last_version=last_version, published_through=published_through)
        self.ack_timeout_s = ack_timeout_s
        self._buffer: Any = None
        self._spec: SharedBuffer | None = None
        self._views: list[tuple[str, Any]] = []
        self._pending: int | None = None
        self._plan: list | None = None
        """`titan.hf_copy_plan`: which entries are plain renames (copied without the adapter)."""
        """The version in the buffer that the servers have not confirmed yet."""

    def publish(self, policy: Any, version: int) -> tuple[Path, dict[str, float]]:
        """Copy `version` into the buffer and announce it; returns the marker and the timings
        (`ack_wait_s`, `copy_s`, `gb`)."""
        marker = marker_path(self.weights_dir, version)
        if version <= self.published_through:
            log.warning("v%d is already published (re-trained after a resume): not shared",
                        version)
            return marker, {}
        if self.rank != 0:
            for _ in hf_tensors(policy):  # take part in every gather
                pass
            return marker, {}
        t0 = time.monotonic()
        self._wait_ack()
        t1 = time.monotonic()
        if self._buffer is None:
            self._allocate(policy)
        self._copy_in(policy)
        t2 = time.monotonic()
        write_text_atomic(marker, BroadcastMarker(
            version=version, update_info=self._info, shared=self._spec).model_dump_json())
        self._pending = version
        gb = self._spec.total_bytes / 1e9
        log.info("shared v%d: %.3f GB copied in %.3fs (waited %.3fs for the previous one)",
                 version, gb, t2 - t1, t1 - t0)
        return marker, {"ack_wait_s": t1 - t0, "copy_s": t2 - t1, "gb": gb}

    def close(self) -> None:
        """Wait briefly for the servers to take the last shared version (its ack file is then
        removed), and free the buffer."""
        from swefleet.shared_weights import release

        try:
            self._wait_ack(min(self.ack_timeout_s, 10.0))
        except AckTimeout as exc:
            log.warning("%s", exc)
        if self._spec is not None:
            release(self._spec)
        self._buffer, self._views = None, []

    def _allocate(self, policy: Any) -> None:
        from swefleet.shared_weights import allocate, views

        self._info = update_info(policy, 1 << 30)
        device = str(next(policy.model.parameters()).device)
        self._buffer, self._spec = allocate(self._info, device, self.weights_dir)
        self._views = views(self._buffer, self._info, self._spec)
        log.info("shared weights buffer: %.3f GB on %s (%s)", self._spec.total_bytes / 1e9,
                 device, self._spec.kind)

    def _copy_in(self, policy: Any) -> None:
        """Every tensor into its place (cast on the device: `copy_` converts the dtype)."""
        import torch
        from swefleet.trainer.titan import hf_copy_plan, iter_planned

        if self._plan is None:
            self._plan = hf_copy_plan(policy)
        pairs = zip(self._views, iter_planned(policy, self._plan), strict=True)
        for (name, view), (hf_name, tensor) in pairs:
            if name != hf_name:
                raise RuntimeError(f"shared weights: {hf_name} where {name} was laid out")
            view.copy_(tensor, non_blocking=True)
        if self._buffer.is_cuda:
            torch.cuda.synchronize(self._buffer.device)

    def _wait_ack(self, timeout_s: float | None = None) -> None:
        """Block until the servers confirmed the version now in the buffer."""
        if self._pending is None:
            return
        timeout_s = self.ack_timeout_s if timeout_s is None else timeout_s
        ack = ack_path(self.weights_dir, self._pending)
        deadline = time.monotonic() + timeout_s
        while not ack.exists():
            if time.monotonic() > deadline:
                raise AckTimeout(
                    f"the servers did not confirm v{self._pending} within {timeout_s:g}s "
                    f"({ack.name} missing): the shared buffer cannot take the next version")
            time.sleep(0.002)
        ack.unlink(missing_ok=True)
        self._pending = None
