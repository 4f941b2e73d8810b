"""The run directory: one place for everything a run writes.

```
<output_dir>/
  config.json            resolved config
  episodes.jsonl         one Trajectory per finished episode (appended as it finishes)
  metrics.jsonl          one record per step (namespaced keys)
  trainer_metrics.jsonl  one record per optimizer step, written by the trainer process
  weights.jsonl          one record per policy version served: version, served_at_s, sync_s
  drops.jsonl            one record per drop: reason, n, episode_ids (counters survive a resume)
  batches/step_NNNNNN.npz   hand-off to the trainer (atomic)
  weights/vNNNNNN/       HF checkpoints published by the trainer (atomic; `.durable` once fsynced)
  weights/vNNNNNN.nccl.json  a version broadcast to the servers instead (weight_sync = "nccl")
  model/                 the initial checkpoint when the project creates it
  logs/                  server and trainer logs
  summary.json           final summary
```
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO

from pydantic import BaseModel

from swefleet.weight_transfer import MARKER_SUFFIX, marker_path

log = logging.getLogger(__name__)

DURABLE_MARKER = ".durable"
"""File in a published version directory once its files and rename are fsynced
(`trainer/export.py`): the trainer marks versions in publication order."""


def is_durable(version_dir: Path) -> bool:
    return (version_dir / DURABLE_MARKER).exists()


def version_dirs(weights_dir: Path) -> dict[int, Path]:
    """version -> `weights_dir/vNNNNNN/` of the published version directories."""
    return {int(d.name[1:]): d for d in weights_dir.glob("v*")
            if d.name[1:].isdigit() and len(d.name) >= 7 and d.is_dir()}


def newest_durable(weights_dir: Path, through: int | None = None) -> int:
    """The newest version (<= `through`) whose directory survives a machine crash (0: none):
    the newest marked one; in a weights directory without any marker (written before them, or
    a crash before the first version was marked) the newest whose files look whole
    (`looks_complete`)."""
    dirs = version_dirs(weights_dir)
    candidates = sorted((v for v in dirs if through is None or v <= through), reverse=True)
    if any(is_durable(d) for d in dirs.values()):
        return next((v for v in candidates if is_durable(dirs[v])), 0)
    return next((v for v in candidates if looks_complete(dirs[v])), 0)


def looks_complete(version_dir: Path) -> bool:
    """Every safetensors file has a readable header and exactly the size it declares, and every
    file an index names is there (what a crash before the fsync typically leaves: empty or
    short files)."""
    try:
        index = version_dir / "model.safetensors.index.json"
        if index.exists():
            names = set(json.loads(index.read_text())["weight_map"].values())
            if not all((version_dir / n).is_file() for n in names):
                return False
        return all(_safetensors_whole(f) for f in version_dir.glob("*.safetensors"))
    except (OSError, ValueError, KeyError, TypeError):
        return False


def _safetensors_whole(path: Path) -> bool:
    size = path.stat().st_size
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        if size < 8 or 8 + n > size:
            return False
        header = json.loads(f.read(n))
    ends = [t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"]
    return 8 + n + max(ends, default=0) == size


def discard_dir(directory: Path) -> None:
    """Remove `directory`: renamed to a `.tmp-` name first (readers and a crash mid-way see it
    gone at once; the trainer cleans `.tmp-` leftovers), then deleted."""
    doomed = directory.with_name(f"{directory.name}.tmp-discard-{uuid.uuid4().hex[:8]}")
    os.rename(directory, doomed)
    shutil.rmtree(doomed, ignore_errors=True)


class RunDir:
    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        for sub in ("batches", "weights", "logs"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    @property
    def episodes(self) -> Path:
        return self.root / "episodes.jsonl"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def drops(self) -> Path:
        return self.root / "drops.jsonl"

    @property
    def trainer_metrics(self) -> Path:
        return self.root / "trainer_metrics.jsonl"

    @property
    def batches(self) -> Path:
        return self.root / "batches"

    @property
    def weights(self) -> Path:
        return self.root / "weights"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def batch_path(self, step: int) -> Path:
        return self.batches / f"step_{step:06d}.npz"

    def weights_path(self, version: int) -> Path:
        """Where policy `version` is published: the HF directory `weights/vNNNNNN/` or the
        broadcast marker `weights/vNNNNNN.nccl.json` (`swefleet/weight_transfer.py`), whichever
        exists (the directory first); when neither does yet, the one this run's trainer writes
        (the marker when it broadcasts: it then writes one for every version)."""
        directory = self.weights / f"v{version:06d}"
        marker = marker_path(self.weights, version)
        if directory.exists() or not (marker.exists() or self.broadcasts):
            return directory
        return marker

    @property
    def broadcasts(self) -> bool:
        """This run's trainer publishes by broadcast: its job (`trainer_job.json`) has a
        `weight_sync` section."""
        try:
            job = json.loads((self.root / "trainer_job.json").read_text())
        except (FileNotFoundError, ValueError):
            return False
        return job.get("weight_sync") is not None

    def reloadable_version(self, through: int) -> int:
        """The newest version <= `through` that is a durable directory (0: none), and the
        broadcast markers after it and the not durable directories after the newest durable one
        removed: a broadcast version lived only in the servers of the run that received it, and a
        version published but not yet fsynced may be torn by a machine crash, so a restarted run
        serves that directory and the trainer publishes the later versions again."""
        version = newest_durable(self.weights, through)
        for marker in self.weights.glob(f"v*{MARKER_SUFFIX}"):
            if int(marker.name[1:].removesuffix(MARKER_SUFFIX)) > version:
                marker.unlink(missing_ok=True)
        newest = newest_durable(self.weights)  # >= version (`through` may stop at a gap)
        for v, d in version_dirs(self.weights).items():
            if v > newest and not is_durable(d):
                log.warning("%s was published but never made durable: discarded", d)
                discard_dir(d)
        return version


def default_output_dir(name: str) -> Path:
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def append_jsonl(path: Path, record: dict | BaseModel) -> None:
    """Append one JSON line and flush it to disk (a crash loses nothing finished). A torn last
    line left by a killed writer is ended first, so it cannot swallow the new record."""
    line = record.model_dump_json() if isinstance(record, BaseModel) else json.dumps(record)
    write_lines(path, (line + "\n").encode("utf-8"))


def write_lines(path: Path, data: bytes, sync: bool = True) -> None:
    """Append `data` (whole lines) to `path`; a torn last line left by a killed writer is
    ended first, so it cannot swallow the new record. fsynced unless `sync` is False."""
    with open(path, "a+b") as f:
        end = f.seek(0, os.SEEK_END)
        if end:
            f.seek(end - 1)
            if f.read(1) != b"\n":
                data = b"\n" + data
        f.write(data)
        f.flush()
        if sync:
            os.fsync(f.fileno())


def read_jsonl(path: Path) -> list[dict]:
    """Read a JSONL file, skipping lines torn by a crash (cut JSON or a cut UTF-8 character);
    a skipped line other than the last is logged."""
    if not path.exists():
        return []
    records = []
    lines = path.read_bytes().split(b"\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except ValueError:  # JSONDecodeError, UnicodeDecodeError
            if i < len(lines) - 1:
                log.warning("%s: line %d is not valid JSON (torn by a crash?); skipped", path,
                            i + 1)
    return records


def write_json_atomic(path: Path, data: dict) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, default=str))


def write_text_atomic(path: str | Path, text: str) -> None:
    """`write_atomic` of `text` (UTF-8)."""
    write_atomic(path, lambda f: f.write(text.encode("utf-8")))


def write_atomic(path: str | Path, write: Callable[[BinaryIO], object]) -> None:
    """The one atomic write: replace `path` with what `write` puts in the open binary file, so
    that a reader (or a crash, or a power loss) sees the old file or the new one, whole: a
    hidden temp file beside it (`.<name>.tmp-<pid>-<random>`, which readers of a directory
    skip) is written and fsynced, renamed over it, then the directory is fsynced so the rename
    itself is durable (POSIX). On an error the old file is untouched, the temp file removed,
    and the error raised."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # umask applies, as usual
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    """Make the renames and creations in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
