"""The torch data plane of weight sync by broadcast (`swefleet/weight_transfer.py`): a process
group of its own, packed buckets out of rank 0, the same buckets unpacked on every other rank.

The group touches no global torch.distributed state: the trainer keeps its FSDP default group,
an inference server has none. It is a `ProcessGroupGloo` (CPU) or `ProcessGroupNCCL` (CUDA)
built directly on a `TCPStore` that rank 0 (the trainer) hosts; keys live under the group's
epoch, so a re-formed group never reads an older one's. Every wait is bounded by the group's
`timeout_s` (a rank that never joins fails the others with `DistStoreError`).

torch is imported inside the functions (the CLI imports the package).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from swefleet.weight_transfer import TransferGroup, UpdateInfo, packed_chunks


@dataclass
class OpenGroup:
    """A joined group: rank, size, the store (kept alive: rank 0 serves it) and the group."""

    group: TransferGroup
    rank: int
    store: Any
    pg: Any
    device: Any
    send_buffer: Any = None
    """Rank 0's bucket, kept from one update to the next (fresh memory costs a page fault per
    page: on CPU that was half of a broadcast's time)."""

    def broadcast(self, tensor: Any) -> None:
        import torch.distributed as dist

        opts = dist.BroadcastOptions()
        opts.rootRank = 0
        opts.timeout = timedelta(seconds=self.group.timeout_s)
        self.pg.broadcast([tensor], opts).wait()

    def synchronize(self) -> None:
        """Wait until the group's GPU work is done (NCCL's `wait` only orders streams)."""
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)


def open_group(group: TransferGroup, rank: int, device: Any = "cpu") -> OpenGroup:
    """Join `group` as `rank` (0 hosts the store); returns once all ranks joined (a 1-byte
    broadcast proves it, also for NCCL, whose communicator is otherwise built lazily)."""
    import torch
    import torch.distributed as dist

    timeout = timedelta(seconds=group.timeout_s)
    store = dist.TCPStore(group.master_address, group.master_port, world_size=group.world_size,
                          is_master=rank == 0, timeout=timeout, wait_for_workers=False)
    prefixed = dist.PrefixStore(f"swefleet-weights/{group.epoch}", store)
    device = torch.device(device)
    if group.backend == "nccl":
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = timeout
        pg = dist.ProcessGroupNCCL(prefixed, rank, group.world_size, opts)
    else:
        pg = dist.ProcessGroupGloo(prefixed, rank, group.world_size, timeout)
        device = torch.device("cpu")
    joined = OpenGroup(group, rank, store, pg, device)
    joined.broadcast(torch.ones(1, dtype=torch.uint8, device=device))
    joined.synchronize()
    return joined


def send_packed(
    joined: OpenGroup, tensors: Iterator[tuple[str, Any]], info: UpdateInfo
) -> None:
    """Rank 0: broadcast `tensors` (in `info`'s order, with its names, dtypes and shapes)
    packed into the buckets of `packed_chunks`; holds one bucket at a time."""
    import torch

    sizes = info.sizes()
    chunks = packed_chunks(sizes, info.packed_buffer_size_bytes)
    largest = max((sum(sizes[i] for i in c) for c in chunks), default=0)
    buf = joined.send_buffer
    if buf is None or buf.numel() < largest:
        buf = joined.send_buffer = torch.empty(largest, dtype=torch.uint8, device=joined.device)
    for chunk in chunks:
        offset = 0
        for i in chunk:  # `wait` ordered the previous broadcast before these copies
            name, tensor = next(tensors)
            _check(info, i, name, tensor)
            flat = tensor.detach().contiguous().view(torch.uint8).view(-1)
            buf[offset:offset + sizes[i]].copy_(flat)
            offset += sizes[i]
            del tensor, flat
        joined.broadcast(buf[:offset])


def receive_packed(
    joined: OpenGroup, info: UpdateInfo, on_tensor: Callable[[str, Any], None]
) -> None:
    """Any rank but 0: receive the buckets of `send_packed` and hand each tensor (a view of its
    bucket, on the group's device) to `on_tensor(name, tensor)`."""
    import torch

    sizes = info.sizes()
    for chunk in packed_chunks(sizes, info.packed_buffer_size_bytes):
        bucket = torch.empty(sum(sizes[i] for i in chunk), dtype=torch.uint8, device=joined.device)
        joined.broadcast(bucket)
        offset = 0
        for i in chunk:
            dtype = getattr(torch, info.dtype_names[i])
            raw = bucket[offset:offset + sizes[i]]
            if offset % dtype.itemsize:  # a view must start at a multiple of its item size
                raw = raw.clone()
            on_tensor(info.names[i], raw.view(dtype).view(info.shapes[i]))
            offset += sizes[i]
    joined.synchronize()  # the tensors are read by another thread (the engine's) next


def _check(info: UpdateInfo, i: int, name: str, tensor: Any) -> None:
    want = (info.names[i], info.dtype_names[i], info.shapes[i])
    got = (name, str(tensor.dtype).removeprefix("torch."), list(tensor.shape))
    if got != want:
        raise ValueError(f"tensor {i} is {got}, the update announced {want}")
