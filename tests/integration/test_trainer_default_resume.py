"""With the default trainer config, a trainer stopped mid-run (SIGTERM, as `swefleet rl` stops
it on Ctrl-C or a crash of the orchestrator) and started again keeps its optimizer state:
Adam's step counter goes on."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from swefleet.trainer.config import TrainerConfig, TrainerJob
from swefleet.trainer.main import StopFlag, run

from swefleet.batch import batch_path, pack_samples, weights_path, write_batch
from swefleet.tinymodel import create_tiny_model

pytestmark = pytest.mark.integration
KNOBS = {"device": "cpu", "lr": 3e-3, "micro_batch_tokens": 40, "logprob_chunk_size": 16,
         "batch_timeout_s": 60}
"""Test-size knobs only: checkpointing is left at its defaults."""


def _write_batches(out: Path, steps: range) -> None:
    rng = np.random.default_rng(0)
    for step in range(max(steps) + 1):
        samples = []
        for i, n in enumerate(rng.integers(8, 30, 4)):
            samples.append({
                "tokens": rng.integers(3, 1024, n).tolist(),
                "loss_mask": [False] * 3 + [True] * (n - 3),
                "inference_logprobs": [0.0] * 3 + (-7 + rng.normal(0, 0.3, n - 3)).tolist(),
                "advantage": float(i % 2 * 2 - 1), "policy_version": step,
            })
        if step in steps:  # (the same batches whichever range is written)
            write_batch(batch_path(out, step), pack_samples(samples), {"step": step})


def _job(model: Path, batches: Path, run_dir: Path, max_steps: int | None) -> TrainerJob:
    return TrainerJob(model=model, batches_dir=batches, weights_dir=run_dir / "weights",
                      max_steps=max_steps, trainer=KNOBS)


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(x) for x in (run_dir / "trainer_metrics.jsonl").read_text().splitlines()]


def _adam_steps(checkpoint: Path) -> set[float]:
    """Adam's per-parameter `step` counters in a DCP checkpoint."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    flat = checkpoint.parent / f"{checkpoint.name}.pt"
    dcp_to_torch_save(str(checkpoint), str(flat))
    state = torch.load(flat, weights_only=False)["optim"]["state"]
    return {float(s["step"]) for s in state.values()}


def test_default_config_checkpoints_and_keeps_the_optimizer_state(tmp_path):
    assert TrainerConfig().checkpoint_every is not None  # resumable by default
    model = create_tiny_model(tmp_path / "tiny", seed=0)
    batches, run_dir = tmp_path / "batches", tmp_path / "run"
    batches.mkdir()
    _write_batches(batches, range(3))

    # first life: trains steps 0-2, then waits for batch 3 and is stopped there (the flag its
    # SIGTERM handler sets; the orchestrator stops it with SIGTERM)
    stop = StopFlag()

    def stop_after_v3() -> None:
        while not weights_path(run_dir / "weights", 3).exists() and not done.is_set():
            time.sleep(0.1)
        stop.event.set()

    done = threading.Event()
    stopper = threading.Thread(target=stop_after_v3)
    stopper.start()
    try:
        assert run(_job(model, batches, run_dir, None), stop) == 0
    finally:
        done.set()
        stopper.join()
    checkpoints = run_dir / "trainer_checkpoints"
    assert (checkpoints / "step_000003").is_dir()  # saved on the way out, by default
    assert _adam_steps(checkpoints / "step_000003") == {3.0}

    # second life, same (default) config: resumes from the checkpoint and trains step 3 with
    # the optimizer state it had (a fresh Adam would count 1 step, not 4)
    _write_batches(batches, range(3, 4))
    assert run(_job(model, batches, run_dir, 4), StopFlag()) == 0
    assert [r["step"] for r in _metrics(run_dir)] == [0, 1, 2, 3]
    assert _adam_steps(checkpoints / "step_000004") == {4.0}
