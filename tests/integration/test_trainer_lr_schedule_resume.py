"""The trainer process follows its learning-rate schedule step by step (the `lr` metric), and a
trainer stopped mid-run and started again goes on with the schedule where it stopped instead of
warming up again."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from swefleet.trainer.config import TrainerJob
from swefleet.trainer.main import StopFlag, run

from swefleet.batch import batch_path, pack_samples, weights_path, write_batch
from swefleet.tinymodel import create_tiny_model

pytestmark = pytest.mark.integration
LR = 3e-3
KNOBS = {"device": "cpu", "lr": LR, "micro_batch_tokens": 40, "logprob_chunk_size": 16,
         "batch_timeout_s": 60, "checkpoint_every": 1,
         "lr_warmup_steps": 2, "lr_decay": "linear", "lr_min_ratio": 0.0}


def _write_batches(out: Path, steps: range) -> None:
    rng = np.random.default_rng(0)
    for step in steps:
        samples = [{
            "tokens": rng.integers(3, 1024, 12).tolist(), "loss_mask": [False] * 3 + [True] * 9,
            "inference_logprobs": [0.0] * 3 + [-7.0] * 9, "advantage": float(i % 2 * 2 - 1),
            "policy_version": step,
        } for i in range(4)]
        write_batch(batch_path(out, step), pack_samples(samples), {"step": step})


def _job(model: Path, batches: Path, run_dir: Path) -> TrainerJob:
    return TrainerJob(model=model, batches_dir=batches, weights_dir=run_dir / "weights",
                      max_steps=4, trainer=KNOBS)


def test_a_resumed_trainer_continues_the_schedule(tmp_path):
    model = create_tiny_model(tmp_path / "tiny", seed=0)
    batches, run_dir = tmp_path / "batches", tmp_path / "run"
    batches.mkdir()
    _write_batches(batches, range(2))

    # first life: steps 0-1 (warm-up), stopped while it waits for batch 2
    stop, done = StopFlag(), threading.Event()

    def stop_after_v2() -> None:
        while not weights_path(run_dir / "weights", 2).exists() and not done.is_set():
            time.sleep(0.1)
        stop.event.set()

    stopper = threading.Thread(target=stop_after_v2)
    stopper.start()
    try:
        assert run(_job(model, batches, run_dir), stop) == 0
    finally:
        done.set()
        stopper.join()

    # second life, same job: resumes from checkpoint 2 and decays over steps 2-3
    _write_batches(batches, range(2, 4))
    assert run(_job(model, batches, run_dir), StopFlag()) == 0
    lines = (run_dir / "trainer_metrics.jsonl").read_text().splitlines()
    records = [json.loads(x) for x in lines]
    assert [r["step"] for r in records] == [0, 1, 2, 3]
    assert [r["lr"] for r in records] == pytest.approx([LR / 2, LR, LR, LR / 2], rel=1e-12)
