"""Publish the policy as a Hugging Face checkpoint directory, atomically.

Everything is written into `<dir>.tmp-XXXX` next to the final directory (same filesystem), each
file fsynced, then the temp directory is renamed to `<dir>`: readers (inference servers, evals)
see either no directory or a complete one. Watchers must ignore names containing `.tmp-`.
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


def export_hf(policy: titan.Policy, out_dir: str | Path, meta: dict | None = None) -> Path:
    """Write the current weights (in the source checkpoint's dtype) + config/tokenizer files to
    `out_dir` atomically. `meta` (e.g. version, step) goes to `swefleet_policy.json`.
    Raises FileExistsError if `out_dir` exists: a published version is never overwritten.
    Under FSDP every rank calls it (the weights are gathered) and rank 0 writes."""
    from safetensors.torch import save_file

    out_dir = Path(out_dir)
    if out_dir.exists():
        raise FileExistsError(f"{out_dir} already exists")
    tensors = {  # a collective under FSDP: every rank gathers, rank 0 writes
        k: v.detach().to(device="cpu", dtype=policy.source_dtype).contiguous()
        for k, v in titan.hf_state_dict(policy).items()
    }
    if _rank() != 0:
        return out_dir
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out_dir.parent, prefix=f"{out_dir.name}.tmp-"))
    try:
        _copy_assets(policy.source_dir, tmp)
        save_file(tensors, str(tmp / WEIGHTS_FILE), metadata={"format": "pt"})
        record = {"written_at": time.time(), **(meta or {})}
        (tmp / POLICY_FILE).write_text(json.dumps(record, indent=2))
        umask = _umask()
        for f in tmp.iterdir():
            os.chmod(f, 0o666 & ~umask)
            _fsync(f)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it 0700; readers may be other users
        _fsync(tmp)
        os.rename(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _fsync(out_dir.parent)
    return out_dir


def state_dicts_equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    """Same keys, shapes, dtypes and bit-identical values."""
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and a[k].shape == b[k].shape and torch.equal(a[k], b[k]) for k in a
    )
