"""Publish the policy as a Hugging Face checkpoint directory, atomically and streamed.

Everything is written into `<dir>.tmp-XXXX` next to the final directory (same filesystem), each
file fsynced, then the temp directory is renamed to `<dir>`: readers (inference servers, evals)
see either no directory or a complete one. Watchers must ignore names containing `.tmp-`.

The weights are gathered one torchtitan parameter at a time (`titan.iter_hf_tensors`; under FSDP
every rank gathers, rank 0 writes) and written as soon as a file's tensors are complete: a
version larger than the shard bound becomes `model-0000i-of-0000N.safetensors` +
`model.safetensors.index.json` (what `save_pretrained` writes), one that fits stays a single
`model.safetensors`. No rank ever holds the whole model; rank 0 holds at most one file's tensors.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import torch

from trainer import titan

#: files of the source checkpoint that are not copied (weights are rewritten; the tiny-model
#: cache marker would wrongly claim the trained weights are the seed's random init)
_SKIP_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".safetensors.index.json")
_SKIP_NAMES = {"swefleet_model.json", "swefleet_policy.json"}

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


def _copy_assets(source: Path, dest: Path) -> None:
    """config.json, tokenizer and generation files: everything but weights."""
    for f in sorted(source.iterdir()):
        if f.is_file() and not f.name.endswith(_SKIP_SUFFIXES) and f.name not in _SKIP_NAMES:
            shutil.copy2(f, dest / f.name)


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

    def __init__(self, out: Path, shards: list[list[str]]) -> None:
        self.out = out
        self.shards = shards
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
            save_file(self.pending, str(self.out / self.files[self.index]), {"format": "pt"})
            self.pending = {}
            self.index += 1

    def finish(self, total_bytes: int) -> None:
        """Check every file is written; the index file when there are several."""
        if self.index != len(self.shards):
            raise RuntimeError(f"export: {self.index} of {len(self.shards)} files written")
        if len(self.files) > 1:
            weight_map = {n: f for names, f in zip(self.shards, self.files) for n in names}
            index = {"metadata": {"total_size": total_bytes}, "weight_map": weight_map}
            (self.out / INDEX_FILE).write_text(json.dumps(index, indent=2, sort_keys=True))


def export_hf(
    policy: titan.Policy,
    out_dir: str | Path,
    meta: dict | None = None,
    shard_bytes: int = DEFAULT_SHARD_BYTES,
) -> Path:
    """Write the current weights (in the source checkpoint's dtype) + config/tokenizer files to
    `out_dir` atomically, in files of at most `shard_bytes`. `meta` (e.g. version, step) goes to
    `swefleet_policy.json`. Raises FileExistsError if `out_dir` exists: a published version is
    never overwritten. Under FSDP every rank calls it (each parameter is gathered on all ranks
    in turn) and rank 0 writes."""
    out_dir = Path(out_dir)
    if out_dir.exists():
        raise FileExistsError(f"{out_dir} already exists")
    dtype = policy.source_dtype
    sizes = {k: s.numel() * dtype.itemsize for k, s in titan.hf_shapes(policy).items()}
    if _rank() != 0:
        for _ in titan.iter_hf_tensors(policy):  # take part in every gather, write nothing
            pass
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f"{out_dir.name}.tmp-"))
    try:
        writer = ShardWriter(tmp, plan_shards(sizes, shard_bytes))
        for name, tensor in titan.iter_hf_tensors(policy):
            writer.add(name, tensor.detach().to(device="cpu", dtype=dtype, copy=True))
        writer.finish(sum(sizes.values()))
        _copy_assets(policy.source_dir, tmp)
        record = {"written_at": time.time(), **(meta or {})}
        (tmp / POLICY_FILE).write_text(json.dumps(record, indent=2))
        _publish_dir(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync(out_dir.parent)
    return out_dir


def _publish_dir(tmp: Path, out_dir: Path) -> None:
    """Make `tmp`'s files durable and readable by others, then rename it to `out_dir`."""
    umask = _umask()
    for f in tmp.iterdir():
        os.chmod(f, 0o666 & ~umask)
        _fsync(f)
    os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it 0700; readers may be other users
    _fsync(tmp)
    os.rename(tmp, out_dir)


def state_dicts_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    """Same keys, shapes, dtypes and bit-identical values."""
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and torch.equal(a[k], b[k]) for k in a
    )
