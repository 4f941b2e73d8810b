"""Resumable trainer state: DCP checkpoints of model + optimizer, written atomically.

Layout: `checkpoint_dir/step_{n:06d}/` holds a `torch.distributed.checkpoint` save of
`{"model": ..., "optim": ...}` (`get_state_dict` names: no compile / AC-wrapper prefixes, FSDP
shards saved by every rank) plus `swefleet_checkpoint.json` (`step` = n = the next batch to
train = the policy version the weights are). It is written into `step_{n:06d}.tmp-save`, the
marker last, then fsynced and renamed (the rename fsynced too) before older checkpoints are
deleted: a directory without `.tmp-` in its name is complete, and a crash at any moment leaves
the previous complete one. A crash leaves only `.tmp-` entries, which `clean_partial` removes on
the next start. The trainer saves off the step path (`trainer/checkpoint_async.py`);
`save_checkpoint` is the same save, inline.

With a process group every rank calls `save_checkpoint` / `load_checkpoint` (collectives);
rank 0 does the file-system bookkeeping.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import torch
from swefleet.trainer import titan

from swefleet.rundir import fsync_dir

MARKER = "swefleet_checkpoint.json"
_NAME = re.compile(r"step_(\d{6,})")


def checkpoint_path(directory: str | Path, step: int) -> Path:
    return Path(directory) / f"step_{step:06d}"


def clean_partial(directory: str | Path) -> list[Path]:
    """Delete the `*.tmp-*` files/directories a crash left in `directory`; returns them."""
    directory = Path(directory)
    removed = []
    if directory.is_dir():
        for p in sorted(directory.iterdir()):
            if ".tmp-" in p.name:
                if p.is_dir() and not p.is_symlink():
                    shutil.rmtree(p)
                else:
                    p.unlink()
                removed.append(p)
    return removed


def complete_checkpoints(directory: str | Path) -> list[tuple[int, Path]]:
    """(step, path) of every complete checkpoint, oldest first."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = []
    for p in directory.iterdir():
        m = _NAME.fullmatch(p.name)
        if m and p.is_dir() and (p / MARKER).is_file():
            found.append((int(m.group(1)), p))
    return sorted(found)


def latest_checkpoint(directory: str | Path) -> tuple[int, Path] | None:
    found = complete_checkpoints(directory)
    return found[-1] if found else None


def _rank() -> int:
    import torch.distributed as dist

    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def state_dict(policy: titan.Policy, optimizer: torch.optim.Optimizer) -> dict:
    """What a checkpoint holds: `{"model": ..., "optim": ...}` (`get_state_dict` names: the
    live tensors, not copies)."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    model_sd, optim_sd = get_state_dict(policy.model, optimizer)
    return {"model": model_sd, "optim": optim_sd}


def _fsync_tree(path: Path) -> None:
    for f in sorted(path.rglob("*")) + [path]:
        fd = os.open(f, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def temp_path(directory: str | Path, step: int) -> Path:
    """Where checkpoint `step` is written before its rename."""
    final = checkpoint_path(directory, step)
    return final.with_name(f"{final.name}.tmp-save")


def prepare_temp(directory: str | Path, step: int) -> Path:
    """(rank 0) An empty `temp_path` for checkpoint `step`; returns it."""
    tmp = temp_path(directory, step)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    if tmp.exists():
        shutil.rmtree(tmp)
    return tmp


def commit_checkpoint(directory: str | Path, step: int, keep: int,
                      meta: dict | None = None) -> Path:
    """(rank 0, once every rank's DCP write of `temp_path(step)` is done) Write the marker,
    fsync, rename into place and fsync the rename, then delete all but the newest `keep`
    complete checkpoints. Returns the checkpoint's path."""
    tmp, final = temp_path(directory, step), checkpoint_path(directory, step)
    record = {"step": step, "written_at": time.time(), **(meta or {})}
    (tmp / MARKER).write_text(json.dumps(record, indent=2))
    _fsync_tree(tmp)
    if final.exists():  # a stale copy of the same step (e.g. re-trained after a resume)
        shutil.rmtree(final)
    os.rename(tmp, final)
    fsync_dir(final.parent)
    for _, old in complete_checkpoints(directory)[:-keep]:
        shutil.rmtree(old)
    return final


def save_checkpoint(
    policy: titan.Policy,
    optimizer: torch.optim.Optimizer,
    directory: str | Path,
    step: int,
    *,
    keep: int,
    meta: dict | None = None,
) -> Path:
    """Save model + optimizer as checkpoint `step` (atomically), then delete all but the
    newest `keep` complete checkpoints. Returns the checkpoint's path."""
    import torch.distributed.checkpoint as dcp

    if _rank() == 0:
        prepare_temp(directory, step)
    _barrier()
    dcp.save(state_dict(policy, optimizer), checkpoint_id=str(temp_path(directory, step)))
    _barrier()
    if _rank() == 0:
        commit_checkpoint(directory, step, keep, meta)
    _barrier()
    return checkpoint_path(directory, step)


def load_checkpoint(
    policy: titan.Policy, optimizer: torch.optim.Optimizer, path: str | Path
) -> dict:
    """Load model + optimizer state from a complete checkpoint into `policy` / `optimizer`
    (built the same way as when it was saved). Returns the checkpoint's marker record."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import set_state_dict

    path = Path(path)
    record = json.loads((path / MARKER).read_text())
    state = state_dict(policy, optimizer)
    dcp.load(state, checkpoint_id=str(path))
    set_state_dict(
        policy.model,
        optimizer,
        model_state_dict=state["model"],
        optim_state_dict=state["optim"],
    )
    return record
