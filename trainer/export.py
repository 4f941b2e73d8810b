"""Publish the policy as a Hugging Face checkpoint directory, atomically and streamed.

Everything is written into `<dir>.tmp-XXXX` next to the final directory (same filesystem), then
the temp directory is renamed to `<dir>`: readers (inference servers, evals) see either no
directory or a complete one. Watchers must ignore names containing `.tmp-`.

Durability (resume after a machine crash) is a second step: the files, the directory and the
rename are fsynced, then the marker `<dir>/.durable` is written (`swefleet.rundir`). `inline`
does it before the rename, on the step path; `background` (`Exporter`) renames at once (servers
on the host read the files from the page cache) and fsyncs in a worker thread, in publication
order. Resume and retention trust only marked versions once a weights directory has one, so a
crash before the marker falls back to the previous version; the first version published into a
weights directory without any marker is therefore made durable inline.

The weights are gathered one torchtitan parameter at a time (`titan.iter_hf_tensors`; under FSDP
every rank gathers, rank 0 writes) and written as soon as a file's tensors are complete: a
version larger than the shard bound becomes `model-0000i-of-0000N.safetensors` +
`model.safetensors.index.json` (what `save_pretrained` writes), one that fits stays a single
`model.safetensors`. No rank ever holds the whole model; rank 0 holds at most one file's tensors
(copied from CUDA into pinned host buffers that an `Exporter` reuses from version to version).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Literal

import torch
from swefleet.trainer import titan

from swefleet.rundir import DURABLE_MARKER, fsync_dir, is_durable, version_dirs, write_text_atomic

log = logging.getLogger(__name__)
Durability = Literal["background", "inline"]

#: files of the source checkpoint that are not copied (weights are rewritten; the tiny-model
#: cache marker would wrongly claim the trained weights are the seed's random init)
_SKIP_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".safetensors.index.json")
_SKIP_NAMES = {"swefleet_model.json", "swefleet_policy.json", DURABLE_MARKER}

WEIGHTS_FILE = "model.safetensors"
POLICY_FILE = "swefleet_policy.json"


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _read_assets(source: Path) -> dict[str, bytes]:
    """config.json, tokenizer and generation files (everything but weights), read into memory:
    a trainer resumed from a published version keeps them when the run's weight retention
    deletes that version."""
    return {f.name: f.read_bytes() for f in sorted(source.iterdir())
            if f.is_file() and not f.name.endswith(_SKIP_SUFFIXES) and f.name not in _SKIP_NAMES}


INDEX_FILE = "model.safetensors.index.json"
DEFAULT_SHARD_BYTES = 2048 * 2**20


def plan_shards(sizes: dict[str, int], shard_bytes: int) -> list[list[str]]:
    """Tensor names (in order) grouped into files of at most `shard_bytes` each (a larger
    tensor alone in its file)."""
    shards: list[list[str]] = [[]]
    used = 0
    for name, size in sizes.items():
        if shards[-1] and used + size > shard_bytes:
            shards.append([])
            used = 0
        shards[-1].append(name)
        used += size
    return shards


def shard_names(n: int) -> list[str]:
    """File names of an `n`-file checkpoint (transformers' convention)."""
    if n == 1:
        return [WEIGHTS_FILE]
    return [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]


class ShardWriter:
    """Collects tensors in plan order and writes each file once its tensors are all in."""

    def __init__(self, out: Path, shards: list[list[str]],
                 before_write: Callable[[], None] | None = None,
                 after_write: Callable[[], None] | None = None) -> None:
        self.out = out
        self.shards = shards
        self.before_write = before_write or (lambda: None)
        self.after_write = after_write or (lambda: None)
        self.files = shard_names(len(shards))
        self.index = 0
        self.pending: dict[str, torch.Tensor] = {}

    def add(self, name: str, tensor: torch.Tensor) -> None:
        from safetensors.torch import save_file

        expected = self.shards[self.index]
        if name != expected[len(self.pending)]:
            raise RuntimeError(f"export: got {name}, expected {expected[len(self.pending)]}")
        self.pending[name] = tensor
        if len(self.pending) == len(expected):
            self.before_write()
            save_file(self.pending, str(self.out / self.files[self.index]), {"format": "pt"})
            self.pending = {}
            self.after_write()
            self.index += 1

    def finish(self, total_bytes: int) -> None:
        """Check every file is written; the index file when there are several."""
        if self.index != len(self.shards):
            raise RuntimeError(f"export: {self.index} of {len(self.shards)} files written")
        if len(self.files) > 1:
            weight_map = {n: f for names, f in zip(self.shards, self.files) for n in names}
            index = {"metadata": {"total_size": total_bytes}, "weight_map": weight_map}
            (self.out / INDEX_FILE).write_text(json.dumps(index, indent=2, sort_keys=True))


class Staging:
    """Host copies of the gathered tensors. With `pinned`, CUDA tensors go into page-locked
    buffers kept from version to version (pooled by shape and dtype: at most one file's worth),
    copied without blocking and synchronized once per file (`sync`, then `release` once the file
    is written); CPU tensors (and all without `pinned`) are plain copies."""

    def __init__(self, pinned: bool) -> None:
        self.pinned = pinned
        self.free: dict[tuple, list[torch.Tensor]] = defaultdict(list)
        self.used: list[tuple[tuple, torch.Tensor]] = []
        self.devices: set[torch.device] = set()

    def copy(self, tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        tensor = tensor.detach()
        if not (self.pinned and tensor.is_cuda):
            return tensor.to(device="cpu", dtype=dtype, copy=True)
        key = (tuple(tensor.shape), dtype)
        free = self.free[key]
        buf = free.pop() if free else torch.empty(key[0], dtype=dtype, pin_memory=True)
        self.used.append((key, buf))
        buf.copy_(tensor.to(dtype), non_blocking=True)  # the cast (if any) on the GPU
        self.devices.add(tensor.device)
        return buf

    def sync(self) -> None:
        """Wait for the copies issued so far (the buffers then hold the values)."""
        for device in self.devices:
            torch.cuda.current_stream(device).synchronize()
        self.devices.clear()

    def release(self) -> None:
        """The buffers handed out so far may be reused (their file is written)."""
        self.sync()
        for key, buf in self.used:
            self.free[key].append(buf)
        self.used = []


def make_durable(out_dir: Path) -> None:
    """fsync a published version's files, its directory and its rename, then write its
    `DURABLE_MARKER` (atomically). A version deleted meanwhile (retention) is left alone."""
    try:
        for f in sorted(out_dir.iterdir()):
            if f.is_file():
                _fsync(f)
        fsync_dir(out_dir)
        fsync_dir(out_dir.parent)
        write_text_atomic(out_dir / DURABLE_MARKER, json.dumps({"durable_at": time.time()}))
    except FileNotFoundError:
        if out_dir.exists():
            raise
        log.warning("%s was deleted before it was made durable", out_dir)


class DurableQueue:
    """Runs `make_durable` in one worker thread, in publication order. At most `max_pending`
    versions wait (a new one first waits for the oldest: dirty pages stay bounded when the disk
    is slower than the steps). A worker's error is raised by the next `submit`/`check`/`wait`."""

    def __init__(self, max_pending: int = 2) -> None:
        self.max_pending = max_pending
        self.pending: list[Future] = []
        self.pool: ThreadPoolExecutor | None = None

    def submit(self, out_dir: Path) -> None:
        self.check()
        while len(self.pending) >= self.max_pending:
            self.pending.pop(0).result()
        if self.pool is None:
            self.pool = ThreadPoolExecutor(1, thread_name_prefix="export-durable")
        self.pending.append(self.pool.submit(make_durable, out_dir))

    def check(self) -> None:
        for future in [f for f in self.pending if f.done()]:
            self.pending.remove(future)
            future.result()

    def wait(self) -> None:
        """Until every submitted version is durable."""
        while self.pending:
            self.pending.pop(0).result()


class Exporter:
    """`export_hf` with state kept between versions: pinned staging buffers (`pinned`, used for
    CUDA weights) and, with `durability="background"`, the thread making versions durable.
    Call `wait` before anything that assumes the published versions durable (a checkpoint of the
    same step) and `close` when done (clean exit)."""

    def __init__(self, durability: Durability = "background", pinned: bool = True) -> None:
        self.durability = durability
        self.staging = Staging(pinned)
        self.queue = DurableQueue()
        self.marked: set[Path] = set()  # weights directories known to hold a marked version
        self.assets: dict[str, bytes] | None = None  # config, tokenizer: `_read_assets`

    def export(self, policy: titan.Policy, out_dir: str | Path, meta: dict | None = None,
               shard_bytes: int = DEFAULT_SHARD_BYTES) -> Path:
        """See `export_hf`."""
        out_dir = Path(out_dir)
        if out_dir.exists():
            raise FileExistsError(f"{out_dir} already exists")
        dtype = policy.source_dtype
        sizes = {k: s.numel() * dtype.itemsize for k, s in titan.hf_shapes(policy).items()}
        if _rank() != 0:
            for _ in titan.iter_hf_tensors(policy):  # take part in every gather, write nothing
                pass
            return out_dir
        self.queue.check()
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f"{out_dir.name}.tmp-"))
        try:
            writer = ShardWriter(tmp, plan_shards(sizes, shard_bytes), self.staging.sync,
                                 self.staging.release)
            for name, tensor in titan.iter_hf_tensors(policy):
                writer.add(name, self.staging.copy(tensor, dtype))
            writer.finish(sum(sizes.values()))
            if self.assets is None:  # read once: the source may be pruned later
                self.assets = _read_assets(policy.source_dir)
            for name, data in self.assets.items():
                (tmp / name).write_bytes(data)
            record = {"written_at": time.time(), **(meta or {})}
            (tmp / POLICY_FILE).write_text(json.dumps(record, indent=2))
            self._publish(tmp, out_dir)
        except BaseException:
            self.staging.release()
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        return out_dir

    def _publish(self, tmp: Path, out_dir: Path) -> None:
        """Make `tmp`'s files readable by others, then rename it to `out_dir`: durable first
        (`inline`) or after, in the worker thread (`background`)."""
        umask = _umask()
        for f in tmp.iterdir():
            os.chmod(f, 0o666 & ~umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it 0700; readers may be other users
        if self.durability == "background" and self._has_marked(out_dir.parent):
            os.rename(tmp, out_dir)
            self.queue.submit(out_dir)
            return
        for f in tmp.iterdir():
            _fsync(f)
        marker = tmp / DURABLE_MARKER
        marker.write_text(json.dumps({"durable_at": time.time()}))
        os.chmod(marker, 0o666 & ~umask)
        _fsync(marker)
        _fsync(tmp)
        os.rename(tmp, out_dir)
        _fsync(out_dir.parent)
        self.marked.add(out_dir.parent)

    def _has_marked(self, weights_dir: Path) -> bool:
        """A version of `weights_dir` is marked (else resume and retention would take its
        unmarked versions for a directory written before the markers)."""
        if weights_dir not in self.marked and any(map(is_durable,
                                                      version_dirs(weights_dir).values())):
            self.marked.add(weights_dir)
        return weights_dir in self.marked

    def wait(self) -> None:
        """Until every version published so far is durable (raises a worker's error)."""
        self.queue.wait()

    def pending(self) -> list[Future]:
        """One future per published version not yet known durable, done once it is (another
        thread may wait on them: `trainer/checkpoint_async.py`)."""
        return list(self.queue.pending)

    def close(self) -> None:
        self.wait()
        if self.queue.pool is not None:
            self.queue.pool.shutdown()
            self.queue.pool = None


def export_hf(
    policy: titan.Policy,
    out_dir: str | Path,
    meta: dict | None = None,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
) -> Path:
    """Write the current weights (in the source checkpoint's dtype) + config/tokenizer files to
    `out_dir` atomically and durably (fsynced before the rename: `inline`), in files of at most
    `shard_bytes`. `meta` (e.g. version, step) goes to `swefleet_policy.json`. Raises
    FileExistsError if `out_dir` exists: a published version is never overwritten. Under FSDP
    every rank calls it (each parameter is gathered on all ranks in turn) and rank 0 writes.
    One-off: a trainer publishing every step keeps an `Exporter`."""
    return Exporter("inline", pinned=False).export(policy, out_dir, meta, shard_bytes)


def state_dicts_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    """Same keys, shapes, dtypes and bit-identical values."""
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and torch.equal(a[k], b[k]) for k in a
    )
