"""Weight sync by broadcast: the wire schema shared by the trainer, the fleet client and the
embedded engine (pydantic only; torch is imported by the modules that move tensors).

With `inference.weight_sync = "nccl"` the trainer publishes version `v` as a small marker
`weights/v{v:06d}.nccl.json` (`BroadcastMarker`, written atomically) instead of an HF directory,
then broadcasts the weights over a dedicated process group in which it is rank 0 and every
inference worker is one of ranks 1..world_size-1 (`TransferGroup`). The orchestrator sees the
marker and calls `fleet.update_weights(v, marker)`, which makes every server join that group
(once per group) and receive the update (`UpdateInfo`: HF names, dtypes, shapes, packed into
buckets). A marker with `path` set stands for a version the trainer also wrote as a directory
(its resume checkpoints): the fleet then loads that directory instead.

`UpdateInfo` has exactly the fields of vLLM 0.26.0's `NCCLWeightTransferUpdateInfo`
(`vllm/distributed/weight_transfer/nccl_engine.py`), so the same dict is the `update_info` of
vLLM's `POST /update_weights`; the packing rule of `packed_chunks` is its
`packed_nccl_broadcast_consumer`'s (`packed_tensor.py`): tensors are appended to a bucket until
its size exceeds `packed_buffer_size_bytes`, then the bucket is broadcast as one uint8 tensor.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MARKER_SUFFIX = ".nccl.json"
GROUP_FILE = "nccl_group.json"
"""In the weights directory: a newer epoch of the group (after a server restart), announced by
the orchestrator and joined by the trainer before its next broadcast."""

#: bytes per element of the dtypes a checkpoint may hold (torch attribute names)
DTYPE_BYTES = {
    "float64": 8, "float32": 4, "bfloat16": 2, "float16": 2,
    "float8_e4m3fn": 1, "float8_e5m2": 1, "int64": 8, "int32": 4, "int8": 1, "uint8": 1,
    "bool": 1,
}  # fmt: skip


class TransferGroup(BaseModel):
    """The weight-transfer process group: where it meets and who is in it."""

    model_config = ConfigDict(extra="forbid")

    master_address: str
    """Address of the trainer's rendezvous store (the trainer listens, the workers connect)."""
    master_port: int = Field(ge=1, le=65535)
    """Port of the rendezvous store."""
    world_size: int = Field(ge=2)
    """1 (the trainer) + every inference worker (embedded server: 1; vLLM: TP x PP x DP)."""
    protocol: Literal["torch", "vllm"] = "torch"
    """Who receives: embedded servers (torch.distributed `ProcessGroupGloo`/`ProcessGroupNCCL`
    over a `TCPStore`) or vLLM's own NCCL weight-transfer engine (its `StatelessProcessGroup` +
    `PyNcclCommunicator`; the trainer then needs vLLM installed)."""
    backend: Literal["gloo", "nccl"] = "gloo"
    """Data plane of the torch protocol: `gloo` (CPU tensors) or `nccl` (CUDA). vLLM: nccl."""
    epoch: int = Field(0, ge=0)
    """Incarnation of the group; a new one (after a server restart) re-forms it everywhere."""
    timeout_s: float = Field(300.0, gt=0)
    """Deadline for every rank to join, and for one collective."""

    @property
    def key(self) -> tuple[str, int, int]:
        """Identity of the group: a server joined to another key must join again."""
        return (self.master_address, self.master_port, self.epoch)


class UpdateInfo(BaseModel):
    """One update: the tensors in broadcast order (vLLM's `NCCLWeightTransferUpdateInfo`)."""

    model_config = ConfigDict(extra="forbid")

    names: list[str]
    """HF parameter names (the names of the exported `model.safetensors`)."""
    dtype_names: list[str]
    """torch dtype attribute names on the wire (`bfloat16`, `float32`, ...)."""
    shapes: list[list[int]]
    packed: bool = True
    """Tensors travel packed into uint8 buckets (always, here)."""
    packed_buffer_size_bytes: int = Field(1 << 30, gt=0)
    """A bucket is closed once it holds more than this many bytes (vLLM's default: 1 GiB)."""
    packed_num_buffers: int = Field(2, ge=1)
    """vLLM's receive buffers in flight (double buffering); the torch protocol ignores it."""

    def sizes(self) -> list[int]:
        """Bytes of each tensor."""
        return [math.prod(s) * dtype_bytes(d) for s, d in zip(self.shapes, self.dtype_names)]

    @property
    def total_bytes(self) -> int:
        return sum(self.sizes())


class SharedBuffer(BaseModel):
    """Where the buffer is and how each tensor lies in it."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["cuda_ipc", "file"]
    """CUDA IPC handle of a device allocation, or a shared-memory file."""
    total_bytes: int = Field(gt=0)
    offsets: list[int]
    """Byte offset of each tensor of the update (in `UpdateInfo.names` order)."""
    path: str | None = None
    """`file`: the mapped file."""
    cuda: dict[str, Any] | None = None
    """`cuda_ipc`: the arguments of torch's `rebuild_cuda_tensor` (bytes as base64)."""


class BroadcastMarker(BaseModel):
    """`weights/v{version:06d}.nccl.json`: the trainer publishes `version`."""

    model_config = ConfigDict(extra="forbid")

    version: int = Field(ge=0)
    group: TransferGroup | None = None
    """The group the weights are broadcast to (None when `path` is set)."""
    update_info: UpdateInfo | None = None
    path: str | None = None
    """Set when the version is (also) a weights directory: its name next to the marker; the
    fleet loads it from the filesystem and nothing is broadcast."""
    shared: SharedBuffer | None = None
    """Set when the version is handed over in memory (`weight_sync = "shared_memory"`,
    `swefleet/shared_weights.py`): the servers copy it from this buffer; no group."""


def dtype_bytes(name: str) -> int:
    try:
        return DTYPE_BYTES[name]
    except KeyError:
        raise ValueError(f"dtype {name!r} cannot be sent (known: {sorted(DTYPE_BYTES)})") from None


def packed_chunks(sizes: list[int], buffer_bytes: int) -> list[range]:
    """Indices of the tensors of each broadcast bucket: a bucket takes tensors until its size
    exceeds `buffer_bytes` (so it may end over it; a large tensor gets a bucket of its own)."""
    chunks, start, total = [], 0, 0
    for i, size in enumerate(sizes):
        total += size
        if total > buffer_bytes:
            chunks.append(range(start, i + 1))
            start, total = i + 1, 0
    if start < len(sizes):
        chunks.append(range(start, len(sizes)))
    return chunks


def ack_path(weights_dir: str | Path, version: int) -> Path:
    """Written once every server took `version` from the shared buffer: the trainer may then
    write the next version into it."""
    return Path(weights_dir) / f"v{version:06d}.loaded"


def marker_path(weights_dir: str | Path, version: int) -> Path:
    """Where the trainer announces a broadcast `version`."""
    return Path(weights_dir) / f"v{version:06d}{MARKER_SUFFIX}"


def is_marker(path: str | Path) -> bool:
    return str(path).endswith(MARKER_SUFFIX)


def read_marker(path: str | Path) -> BroadcastMarker:
    return BroadcastMarker.model_validate_json(Path(path).read_bytes())
