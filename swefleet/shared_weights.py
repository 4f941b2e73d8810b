"""Weights handed over in memory: one flat buffer the trainer fills and every server reads.

With `inference.weight_sync = "shared_memory"` the trainer keeps one flat byte buffer holding
every parameter in HF naming (the tensors `trainer/export.py` would write), copies each new
version into it and announces it with a marker (`weight_transfer.BroadcastMarker.shared`). The
servers map the same memory once and copy from it into their own parameters:

- **CUDA** (trainer on a GPU): the buffer is one CUDA allocation shared by CUDA IPC
  (`cudaIpcGetMemHandle`, through torch's own `reduce_tensor` / `rebuild_cuda_tensor`); a
  server on the same host maps it into its address space; copies run device to device.
- **CPU**: the buffer is a file in shared memory (`/dev/shm`, else the weights directory)
  mapped by both sides (`torch.from_file(shared=True)`).

The handle travels as JSON (`SharedBuffer`): bytes as base64, no pickle. The trainer writes
version v+1 into the buffer only once every server confirmed v (`ack_path`): a reader never
sees a half-written version.
"""

from __future__ import annotations

import base64
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from swefleet.weight_transfer import SharedBuffer, UpdateInfo, dtype_bytes

#: byte alignment of each tensor in the buffer (any dtype view is then aligned)
ALIGN = 256


def layout(info: UpdateInfo) -> tuple[list[int], int]:
    """Aligned byte offsets of the update's tensors and the buffer's size."""
    offsets, end = [], 0
    for size in info.sizes():
        offsets.append(end)
        end += math.ceil(size / ALIGN) * ALIGN
    return offsets, max(end, ALIGN)


def allocate(info: UpdateInfo, device: str, directory: Path) -> tuple[Any, SharedBuffer]:
    """A new buffer for `info` on `device` and its handle (the caller keeps the tensor alive:
    a server's mapping is only valid while it is)."""
    import torch

    offsets, total = layout(info)
    if device.startswith("cuda"):
        buffer = torch.empty(total, dtype=torch.uint8, device=device)
        return buffer, SharedBuffer(kind="cuda_ipc", total_bytes=total, offsets=offsets,
                                    cuda=_cuda_handle(buffer))
    shm = Path("/dev/shm")
    where = shm if shm.is_dir() and os.access(shm, os.W_OK) else Path(directory)
    fd, name = tempfile.mkstemp(prefix="swefleet-weights-", suffix=".bin", dir=where)
    os.ftruncate(fd, total)
    os.close(fd)
    buffer = torch.from_file(name, shared=True, size=total, dtype=torch.uint8)
    return buffer, SharedBuffer(kind="file", total_bytes=total, offsets=offsets, path=name)


def open_buffer(spec: SharedBuffer, device: Any = None) -> Any:
    """Map the buffer `spec` describes (on CUDA: on `device`, default the current one)."""
    import torch

    if spec.kind == "file":
        if spec.path is None or not Path(spec.path).exists():
            raise FileNotFoundError(f"shared weights file {spec.path} is gone (trainer exited?)")
        return torch.from_file(spec.path, shared=True, size=spec.total_bytes, dtype=torch.uint8)
    from torch.multiprocessing.reductions import rebuild_cuda_tensor

    a = dict(spec.cuda or {})
    index = torch.cuda.current_device() if device is None else torch.device(device).index or 0
    raw = {k: base64.b64decode(a[k]) for k in ("handle", "ref_counter_handle", "event_handle")}
    return rebuild_cuda_tensor(
        torch.Tensor, torch.Size(a["size"]), tuple(a["stride"]), a["offset"],
        torch.UntypedStorage, torch.uint8, index, raw["handle"], a["storage_size_bytes"],
        a["storage_offset_bytes"], False, raw["ref_counter_handle"], a["ref_counter_offset"],
        raw["event_handle"], a["event_sync_required"])


def views(buffer: Any, info: UpdateInfo, spec: SharedBuffer) -> list[tuple[str, Any]]:
    """(HF name, tensor view into `buffer`) for every tensor of the update."""
    import torch

    out = []
    for name, dtype, shape, offset, size in zip(info.names, info.dtype_names, info.shapes,
                                                spec.offsets, info.sizes()):
        dtype_bytes(dtype)  # a known dtype, or a clear error
        flat = buffer[offset:offset + size].view(getattr(torch, dtype))
        out.append((name, flat.view(shape)))
    return out


def release(spec: SharedBuffer) -> None:
    """The trainer is done with the buffer: remove its file (CUDA memory goes with the process)."""
    if spec.kind == "file" and spec.path:
        Path(spec.path).unlink(missing_ok=True)


def _cuda_handle(buffer: Any) -> dict[str, Any]:
    import torch
    from torch.multiprocessing.reductions import reduce_tensor

    _rebuild, args = reduce_tensor(buffer)
    (_cls, size, stride, offset, _storage_cls, dtype, _device, handle, storage_size,
     storage_offset, _grad, ref_handle, ref_offset, event_handle, event_sync) = args
    assert dtype == torch.uint8
    b64 = lambda b: base64.b64encode(b or b"").decode()
    return {"size": list(size), "stride": list(stride), "offset": offset,
            "handle": b64(handle), "storage_size_bytes": storage_size,
            "storage_offset_bytes": storage_offset, "ref_counter_handle": b64(ref_handle),
            "ref_counter_offset": ref_offset, "event_handle": b64(event_handle),
            "event_sync_required": bool(event_sync)}
