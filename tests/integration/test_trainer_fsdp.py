"""FSDP2 on CPU: two `python -m swefleet.trainer.main` ranks (gloo; the environment torchrun would set)
train the same steps as one process, and their sharded DCP checkpoint resumes in one process."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from swefleet.trainer.config import TrainerJob
from swefleet.trainer.main import StopFlag, run

from swefleet.batch import batch_path, pack_samples, weights_path, write_batch
from swefleet.tinymodel import create_tiny_model
from tests.trainer_ranks import (
    finish,
    launch_trainer_ranks,
    rl_sample,
    trainer_job,
    trainer_records,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return create_tiny_model(tmp_path_factory.getbasetemp() / "tiny-qwen3", seed=0)


def _batches(out: Path) -> Path:
    """Steps 0-2; 5 samples of uneven lengths, so the ranks get different micro-batch counts."""
    out.mkdir()
    rng = np.random.default_rng(3)
    for step in range(3):
        samples = []
        for i, n in enumerate([9, 31, 12, 7, 26]):
            samples.append(rl_sample(rng, n, 1024, prompt=2, mean_logp=-7, i=i, version=step))
        write_batch(batch_path(out, step), pack_samples(samples), {"step": step})
    return out


def _job(tiny, batches, run_dir: Path, max_steps: int, every: int | None = 1) -> dict:
    return trainer_job(tiny, batches, run_dir, max_steps, checkpoint_every=every)


def _weights(run_dir: Path, version: int) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(weights_path(run_dir / "weights", version) / "model.safetensors")


def test_two_rank_fsdp_matches_one_process_and_its_checkpoint_resumes(tiny, tmp_path):
    batches = _batches(tmp_path / "batches")
    single, fsdp = tmp_path / "single", tmp_path / "fsdp"
    (tmp_path / "fsdp.json").write_text(json.dumps(_job(tiny, batches, fsdp, 2)))
    procs = launch_trainer_ranks(tmp_path / "fsdp.json", OMP_NUM_THREADS="1")
    # meanwhile, the same three steps in this process
    assert run(TrainerJob.model_validate(_job(tiny, batches, single, 3, None)), StopFlag()) == 0
    outs = finish(procs)
    assert "on cpu x2" in outs[0]

    want, got = trainer_records(single), trainer_records(fsdp)
    assert sorted(got) == [0, 1]
    for step in (0, 1):
        for key in ("loss", "grad_norm", "entropy", "clip_fraction", "padding_fraction"):
            assert got[step][key] == pytest.approx(want[step][key], rel=1e-5, abs=1e-7), key
    for version in (1, 2):
        a, b = _weights(fsdp, version), _weights(single, version)
        assert a.keys() == b.keys()
        for k in a:
            # Adam's first updates are +-lr (3e-3) per element; 1e-5 allows summation-order noise
            torch.testing.assert_close(a[k], b[k], rtol=1e-4, atol=1e-5)
    shards = sorted(p.name for p in (fsdp / "trainer_checkpoints" / "step_000002").iterdir())
    assert shards == [".metadata", "__0_0.distcp", "__1_0.distcp", "swefleet_checkpoint.json"]

    # the 2-rank (sharded) checkpoint loads into one process, which trains step 2 like `single`
    assert run(TrainerJob.model_validate(_job(tiny, batches, fsdp, 3, None)), StopFlag()) == 0
    resumed = trainer_records(fsdp)[2]
    for key in ("loss", "grad_norm", "entropy"):
        assert resumed[key] == pytest.approx(want[2][key], rel=1e-5), key
