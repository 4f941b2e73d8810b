"""The run directory: one place for everything a run writes.

```
<output_dir>/
  config.json            resolved config
  episodes.jsonl         one Trajectory per finished episode (appended as it finishes)
  metrics.jsonl          one record per step (namespaced keys)
  trainer_metrics.jsonl  one record per optimizer step, written by the trainer process
  weights.jsonl          one record per policy version served: version, served_at_s, sync_s
  batches/step_NNNNNN.npz   hand-off to the trainer (atomic)
  weights/vNNNNNN/       HF checkpoints published by the trainer (atomic)
  model/                 the initial checkpoint when the project creates it
  logs/                  server and trainer logs
  summary.json           final summary
```
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from pydantic import BaseModel


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
        return self.weights / f"v{version:06d}"


def default_output_dir(name: str) -> Path:
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


def append_jsonl(path: Path, record: dict | BaseModel) -> None:
    """Append one JSON line and flush it to disk (a crash loses nothing finished)."""
    line = record.model_dump_json() if isinstance(record, BaseModel) else json.dumps(record)
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_jsonl(path: Path) -> list[dict]:
    """Read a JSONL file, skipping a torn last line left by a crash."""
    if not path.exists():
        return []
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return records


def write_json_atomic(path: Path, data: dict) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path)
