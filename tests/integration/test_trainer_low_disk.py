"""Low disk pauses the trainer's exports (a warning, `disk_paused_saves` in its step record,
no traceback, no torn version) until there is room again; then the run goes on."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np
import pytest
from swefleet.trainer import disk_guard
from swefleet.trainer.config import TrainerJob
from swefleet.trainer.main import StopFlag, run

from swefleet.batch import batch_path, pack_samples, write_batch
from swefleet.diskspace import free_bytes
from swefleet.rundir import looks_complete, read_jsonl
from swefleet.tinymodel import create_tiny_model
from tests.tmpfs import small_tmpfs

pytestmark = pytest.mark.integration


@pytest.fixture
def small_fs(tmp_path) -> Path:
    with small_tmpfs(tmp_path, "16m") as mnt:
        yield mnt


def _batches(out: Path, steps: int) -> Path:
    out.mkdir()
    rng = np.random.default_rng(0)
    for step in range(steps):
        samples = [{"tokens": rng.integers(3, 1024, 12).tolist(),
                    "loss_mask": [False] * 3 + [True] * 9,
                    "inference_logprobs": [0.0] * 3 + [-7.0] * 9,
                    "advantage": float(i % 2 * 2 - 1), "policy_version": step}
                   for i in range(2)]
        write_batch(batch_path(out, step), pack_samples(samples), {"step": step})
    return out


class FreeOnPause(logging.Handler):
    """Deletes `ballast` half a second after the trainer says it paused."""

    def __init__(self, ballast: Path) -> None:
        super().__init__()
        self.ballast = ballast

    def emit(self, record: logging.LogRecord) -> None:
        if "paused" in record.getMessage():
            threading.Timer(0.5, self.ballast.unlink).start()


def test_low_disk_pauses_the_export_until_there_is_room(small_fs, tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(disk_guard, "RECHECK_S", 0.2)
    model = create_tiny_model(tmp_path / "tiny", seed=0)
    run_dir = small_fs / "run"
    job = TrainerJob(model=model, batches_dir=_batches(tmp_path / "batches", 2),
                     weights_dir=run_dir / "weights", max_steps=2,
                     trainer={"device": "cpu", "micro_batch_tokens": 40, "checkpoint_every": 1,
                              "batch_timeout_s": 30, "disk_min_free_gb": 0.004})
    ballast = small_fs / "ballast"
    ballast.write_bytes(b"\0" * (free_bytes(small_fs) - 3 * 2**20))  # 3 MiB left: < 4 MB + v1
    frees = FreeOnPause(ballast)  # the user frees space a moment after the pause
    logging.getLogger(disk_guard.__name__).addHandler(frees)
    try:
        with caplog.at_level(logging.WARNING):
            assert run(job, StopFlag()) == 0
    finally:
        logging.getLogger(disk_guard.__name__).removeHandler(frees)

    records = read_jsonl(run_dir / "trainer_metrics.jsonl")
    assert "low disk" in caplog.text and "paused" in caplog.text, caplog.text
    assert [r["step"] for r in records] == [0, 1]
    assert records[0]["disk_paused_saves"] == 1 and records[0]["disk_free_gb"] > 0.004
    assert records[1]["checkpoint_blocking_s"] > 0
    versions = sorted((run_dir / "weights").glob("v*"))
    assert [v.name for v in versions] == ["v000001", "v000002"]
    assert all(looks_complete(v) for v in versions)
    assert [p.name for p in (run_dir / "trainer_checkpoints").iterdir()] == ["step_000002"]
