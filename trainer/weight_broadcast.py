"""Publish policy versions by broadcast instead of HF directories (`inference.weight_sync =
"nccl"`; the protocol: `swefleet/weight_transfer.py`).

After each optimizer step every trainer rank calls `WeightBroadcaster.publish(policy, v)`:
rank 0 writes the marker `weights/v{v:06d}.nccl.json` (version, HF names, dtypes, shapes;
atomic), joins the weight-transfer group if it is not in it yet (the orchestrator makes every
inference worker join when it sees the marker), then broadcasts the weights in HF naming, the
same tensors `trainer/export.py` writes (`titan.iter_hf_tensors`, cast to the checkpoint's
dtype), packed into buckets of `bucket_mb`. FSDP2 parameters are gathered one at a time on all
ranks (`full_tensor()`); only rank 0 is in the transfer group, the other ranks just take part
in the gathers.

Two receivers: embedded servers (`protocol = "torch"`: a torch.distributed group over gloo or
nccl, `swefleet/broadcast.py`) and vLLM 0.26 servers (`protocol = "vllm"`: vLLM's NCCL
weight-transfer engine, reached through its own `StatelessProcessGroup` + `PyNcclCommunicator`
and `NCCLWeightTransferEngine.trainer_send_weights` — the trainer imports vLLM for that, which
only a vLLM run needs).

A re-formed group (after an inference server restarted) is announced by the orchestrator in
`weights/nccl_group.json` (a `TransferGroup` with a higher epoch); the trainer reads it before
every broadcast and joins the new group. Every wait is bounded by the group's `timeout_s`: a
worker that never joins or a broadcast that never completes fails the trainer with a message
(a stuck NCCL broadcast exits the process: an NCCL call cannot be interrupted).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any, Self

from swefleet.rundir import write_text_atomic
from swefleet.weight_transfer import (
    GROUP_FILE,
    BroadcastMarker,
    TransferGroup,
    UpdateInfo,
    marker_path,
)

log = logging.getLogger("trainer")


def update_info(policy: Any, bucket_bytes: int) -> UpdateInfo:
    """The names, wire dtypes and shapes of one broadcast (no communication)."""
    from swefleet.trainer import titan

    shapes = titan.hf_shapes(policy)
    dtype = str(policy.source_dtype).removeprefix("torch.")
    return UpdateInfo(names=list(shapes), dtype_names=[dtype] * len(shapes),
                      shapes=[list(s) for s in shapes.values()],
                      packed_buffer_size_bytes=bucket_bytes)


def hf_tensors(policy: Any):
    """(HF name, full tensor in the checkpoint's dtype): gathers on every rank, in turn."""
    from swefleet.trainer import titan

    for name, tensor in titan.iter_hf_tensors(policy):
        yield name, tensor.detach().to(dtype=policy.source_dtype)


class WeightBroadcaster:
    """One per trainer rank; only rank 0 writes markers and joins the transfer group."""

    def __init__(self, group: TransferGroup, bucket_bytes: int, weights_dir: Path, rank: int,
                 *, export_every: int | None = None, last_version: int | None = None,
                 published_through: int = 0) -> None:
        self.group = group
        self.bucket_bytes = bucket_bytes
        self.weights_dir = Path(weights_dir)
        self.rank = rank
        self.export_every = export_every
        self.last_version = last_version
        self.published_through = published_through
        """Versions up to this one are already published as directories (a resume from an
        older checkpoint re-trains them): they are not broadcast again."""
        self._sender: _TorchSender | _VllmSender | None = None
        self._info: UpdateInfo | None = None

    @classmethod
    def from_job(cls, job: Any, rank: int, published_through: int) -> WeightBroadcaster | None:
        """The job's broadcaster, or None when it publishes directories only."""
        if job.weight_sync is None:
            return None
        end = None if job.max_steps is None else job.start_version + job.max_steps
        if job.weight_sync.shared:
            from swefleet.trainer.weight_share import WeightSharer

            return WeightSharer(job.weights_dir, rank, ack_timeout_s=job.weight_sync.ack_timeout_s,
                                export_every=job.trainer.checkpoint_every, last_version=end,
                                published_through=published_through)
        return cls(job.weight_sync.group, job.weight_sync.bucket_mb << 20, job.weights_dir,
                   rank, export_every=job.trainer.checkpoint_every, last_version=end,
                   published_through=published_through)

    def exports(self, version: int) -> bool:
        """Whether `version` is (also) written as a directory: every `export_every`-th and the
        last one (resume, evaluation); the others are only broadcast."""
        every = self.export_every
        return bool(every and version % every == 0) or version == self.last_version

    def publish(self, policy: Any, version: int) -> tuple[Path, dict[str, float]]:
        """Announce and broadcast `version` (every rank calls it); returns the marker and the
        timings (`join_s`, `broadcast_s`, `gb`)."""
        marker = marker_path(self.weights_dir, version)
        if version <= self.published_through:
            log.warning("v%d is already published (re-trained after a resume): not broadcast",
                        version)
            return marker, {}
        if self._info is None:
            self._info = update_info(policy, self.bucket_bytes)
        if self.rank != 0:
            for _ in hf_tensors(policy):  # take part in every gather
                pass
            return marker, {}
        group = self._current_group()
        write_text_atomic(marker, BroadcastMarker(
            version=version, group=group, update_info=self._info).model_dump_json())
        t0 = time.monotonic()
        sender = self._join(group)
        t1 = time.monotonic()
        with _Deadline(2 * group.timeout_s, f"broadcast of v{version}"):
            sender.send(hf_tensors(policy), self._info)
        t2 = time.monotonic()
        gb = self._info.total_bytes / 1e9
        log.info("broadcast v%d: %.3f GB in %.2fs (%.2f GB/s; joining %.2fs)", version, gb,
                 t2 - t1, gb / max(t2 - t1, 1e-9), t1 - t0)
        return marker, {"join_s": t1 - t0, "broadcast_s": t2 - t1, "gb": gb}

    def announce_dir(self, version: int, path: Path) -> None:
        """Rank 0: `version` is the directory `path` (a resume checkpoint): a marker pointing
        to it, for an orchestrator waiting on the marker; nothing is broadcast."""
        if self.rank == 0:
            marker = BroadcastMarker(version=version, path=Path(path).name)
            write_text_atomic(marker_path(self.weights_dir, version), marker.model_dump_json())

    def close(self) -> None:
        self._sender = None

    def _current_group(self) -> TransferGroup:
        """The job's group, or a newer epoch the orchestrator announced."""
        path = self.weights_dir / GROUP_FILE
        if path.exists():
            newer = TransferGroup.model_validate_json(path.read_bytes())
            if newer.epoch > self.group.epoch:
                self.group = newer
        return self.group

    def _join(self, group: TransferGroup) -> _TorchSender | _VllmSender:
        if self._sender is not None and self._sender.group == group:
            return self._sender
        self._sender = None
        log.info("joining weight-transfer group %s:%d epoch %d (world %d, %s/%s)",
                 group.master_address, group.master_port, group.epoch, group.world_size,
                 group.protocol, group.backend)
        cls = _VllmSender if group.protocol == "vllm" else _TorchSender
        self._sender = cls(group)
        return self._sender


class _TorchSender:
    """Rank 0 of a torch.distributed group (`swefleet/broadcast.py`) of embedded servers."""

    def __init__(self, group: TransferGroup) -> None:
        from swefleet.broadcast import open_group

        self.group = group
        device = _cuda_device() if group.backend == "nccl" else "cpu"
        try:
            self.joined = open_group(group, 0, device)
        except Exception as exc:  # DistStoreError: a worker never came
            raise RuntimeError(
                f"weight-transfer group {group.master_address}:{group.master_port} not formed "
                f"within {group.timeout_s:g}s (world_size {group.world_size}: did every "
                f"inference server join?): {exc}") from exc

    def send(self, tensors, info: UpdateInfo) -> None:
        from swefleet.broadcast import send_packed

        send_packed(self.joined, tensors, info)
        self.joined.synchronize()


class _VllmSender:
    """Rank 0 of vLLM's weight-transfer group: what `NCCLWeightTransferEngine.trainer_init`
    does (vllm/distributed/weight_transfer/nccl_common.py), with our timeout."""

    def __init__(self, group: TransferGroup) -> None:
        from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
        from vllm.distributed.utils import StatelessProcessGroup

        self.group = group
        pg = StatelessProcessGroup.create(
            host=group.master_address, port=group.master_port, rank=0,
            world_size=group.world_size, store_timeout=int(group.timeout_s))
        self.comm = PyNcclCommunicator(pg, device=_cuda_device())

    def send(self, tensors, info: UpdateInfo) -> None:
        import torch
        from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferEngine

        NCCLWeightTransferEngine.trainer_send_weights(tensors, {
            "group": self.comm, "packed": True,
            "packed_buffer_size_bytes": info.packed_buffer_size_bytes,
            "packed_num_buffers": info.packed_num_buffers,
        })
        torch.cuda.synchronize()


def _cuda_device() -> Any:
    import torch

    return torch.device("cuda", torch.cuda.current_device())


class _Deadline:
    """Exit the process when a block overruns: a broadcast stuck in NCCL (a receiver gone)
    cannot be interrupted, and a trainer hanging forever would hang the run."""

    def __init__(self, timeout_s: float, what: str) -> None:
        self.timeout_s = timeout_s
        self.what = what
        self._done = threading.Event()

    def __enter__(self) -> Self:
        threading.Thread(target=self._watch, daemon=True, name="broadcast-deadline").start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()

    def _watch(self) -> None:
        if not self._done.wait(self.timeout_s):
            log.critical("%s did not finish within %gs (a receiver gone?): exiting",
                         self.what, self.timeout_s)
            logging.shutdown()
            os._exit(1)
