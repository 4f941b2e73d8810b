"""Disk space of a run: free bytes of the filesystem holding a path (before the path exists),
bytes a directory tree holds, and whether an error is a full disk. No heavy imports."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

GB = 1e9
"""Disk sizes are reported in decimal gigabytes, as `df -H` does."""

_FULL = {errno.ENOSPC, errno.EDQUOT}


def existing_ancestor(path: str | Path) -> Path:
    """`path` itself or its nearest existing parent (where a directory to be made will live)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def free_bytes(path: str | Path) -> int:
    """Bytes an unprivileged writer may still use on the filesystem that holds (or will hold)
    `path`."""
    return shutil.disk_usage(existing_ancestor(path)).free


def device_of(path: str | Path) -> int:
    """The filesystem (st_dev) that holds (or will hold) `path`."""
    return os.stat(existing_ancestor(path)).st_dev


def tree_bytes(path: str | Path) -> int:
    """Bytes the files under `path` occupy (allocated blocks; 0 when it does not exist)."""
    total = 0
    for root, _dirs, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_blocks * 512
            except FileNotFoundError:  # deleted meanwhile (retention)
                pass
    return total


def is_disk_full(exc: BaseException) -> bool:
    """`exc`, its causes, or the per-rank failures of a DCP `CheckpointException` include an
    OSError of a full disk or quota (ENOSPC, EDQUOT)."""
    seen: set[int] = set()
    todo = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, OSError) and e.errno in _FULL:
            return True
        failures = getattr(e, "failures", None)  # CheckpointException: rank -> (exc, trace)
        if isinstance(failures, dict):
            for failure in failures.values():
                todo.append(failure[0] if isinstance(failure, tuple) else failure)
        todo.extend((e.__cause__, e.__context__))
    return False
