"""Content hashes of files and checkpoints: what a run's fingerprint (`swefleet/fingerprint.py`)
records of its model, tasks and predictions, so the same bytes under another path match and
other bytes under the same path do not.

A checkpoint is hashed file by file, every regular file under its directory in path order
(hidden names such as the `.durable` marker skipped): each file's relative path and size, then

- a file of at most `FULL_BYTES` (256 MiB): all its bytes;
- a larger file (the weight shards of a big model): its safetensors header when it has one
  (every tensor's name, dtype, shape and offsets) and `SAMPLES` chunks of `CHUNK` bytes spread
  evenly over the file, the first and the last included (4 MiB of it), so a 100 GB
  checkpoint hashes in seconds. Two such files that differ only between the sampled chunks hash
  alike: a checkpoint trained further changes nearly every weight and so the samples too, but
  an edit of a few bytes in place may go unseen.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

FULL_BYTES = 256 << 20
SAMPLES = 64
CHUNK = 64 << 10
HEADER_MAX = 100 << 20
"""A safetensors header longer than this is not one (the format caps it at 100 MB)."""


def file_hash(path: str | Path) -> str:
    """`sha256:<hex>` of all of a file's bytes."""
    with open(path, "rb") as f:
        return "sha256:" + hashlib.file_digest(f, "sha256").hexdigest()


def checkpoint_hash(path: str | Path) -> str:
    """`sha256:<hex>` of a checkpoint directory by the scheme above (a file: `file_hash`)."""
    root = Path(path)
    if root.is_file():
        return file_hash(root)
    digest = hashlib.sha256()
    for file in _files(root):
        size = file.stat().st_size
        digest.update(json.dumps([file.relative_to(root).as_posix(), size]).encode())
        with open(file, "rb") as f:
            if size <= FULL_BYTES:
                digest.update(hashlib.file_digest(f, "sha256").digest())
            else:
                _sample(f, size, file.suffix == ".safetensors", digest)
    return "sha256:" + digest.hexdigest()


def _files(root: Path) -> list[Path]:
    """The regular files under `root`, none of them hidden or in a hidden directory."""
    return sorted(p for p in root.rglob("*") if p.is_file()
                  and not any(part.startswith(".") for part in p.relative_to(root).parts))


def _sample(f, size: int, safetensors: bool, digest) -> None:
    if safetensors:
        n = int.from_bytes(f.read(8), "little")
        if n <= min(HEADER_MAX, size - 8):
            digest.update(f.read(n))
    for i in range(SAMPLES):
        f.seek((size - CHUNK) * i // (SAMPLES - 1))
        digest.update(f.read(CHUNK))


def short(digest: str) -> str:
    """The first 12 hex digits of a `sha256:<hex>` digest, for messages."""
    return digest.removeprefix("sha256:")[:12]
