"""Resume: a job that crashed continues from its newest complete DCP checkpoint bit-for-bit,
and what the crash left half-written (`.tmp-` directories) is removed."""

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

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    return create_tiny_model(tmp_path_factory.getbasetemp() / "tiny-qwen3", seed=0)


@pytest.fixture(scope="module")
def batches(tmp_path_factory) -> Path:
    """Four different batches (steps 0-3) of prompt + generated tokens, advantages +-1."""
    out = tmp_path_factory.mktemp("batches")
    rng = np.random.default_rng(0)
    for step in range(4):
        samples = []
        for i, n in enumerate(rng.integers(8, 30, 4)):
            samples.append(
                {
                    "tokens": rng.integers(3, 1024, n).tolist(),
                    "loss_mask": [False] * 3 + [True] * (n - 3),
                    "inference_logprobs": [0.0] * 3 + (-7 + rng.normal(0, 0.3, n - 3)).tolist(),
                    "advantage": float(i % 2 * 2 - 1),
                    "policy_version": step,
                }
            )
        write_batch(batch_path(out, step), pack_samples(samples), {"step": step})
    return out


def _job(tiny, batches, run_dir: Path, max_steps: int, every: int | None) -> TrainerJob:
    return TrainerJob(
        model=tiny,
        batches_dir=batches,
        weights_dir=run_dir / "weights",
        max_steps=max_steps,
        trainer={
            "device": "cpu",
            "lr": 3e-3,
            "micro_batch_tokens": 40,
            "logprob_chunk_size": 16,
            "checkpoint_every": every,
            "keep_checkpoints": 2,
            "batch_timeout_s": 5,
        },
    )


def _metrics(run_dir: Path) -> dict[int, dict]:
    lines = (run_dir / "trainer_metrics.jsonl").read_text().splitlines()
    return {r["step"]: r for r in map(json.loads, lines)}


def _weights(run_dir: Path, version: int) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(weights_path(run_dir / "weights", version) / "model.safetensors")


def test_resumed_run_matches_an_uninterrupted_one_bit_for_bit(tiny, batches, tmp_path):
    from swefleet.trainer.export import state_dicts_equal

    straight, crashed = tmp_path / "straight", tmp_path / "crashed"
    assert run(_job(tiny, batches, straight, 4, None), StopFlag()) == 0

    # first life: 3 steps, checkpoints after step 2 (every 2) and when stopping (version 3)
    assert run(_job(tiny, batches, crashed, 3, 2), StopFlag()) == 0
    ckpts = crashed / "trainer_checkpoints"
    assert sorted(p.name for p in ckpts.iterdir()) == ["step_000002", "step_000003"]
    # make it a crash during step 3's checkpoint and step 4's export: the newest complete
    # checkpoint is version 2; half-written directories are left behind
    import shutil

    shutil.rmtree(ckpts / "step_000003")
    (ckpts / "step_000003.tmp-save").mkdir()
    (ckpts / "step_000003.tmp-save" / "__0_0.distcp").write_bytes(b"partial")
    half = crashed / "weights" / "v000004.tmp-x1y2"
    half.mkdir()
    (half / "model.safetensors").write_bytes(b"partial")

    # second life, same job: resumes at version 2, re-trains step 2 (v3 stays as published),
    # then trains step 3
    assert run(_job(tiny, batches, crashed, 4, 2), StopFlag()) == 0
    assert sorted(p.name for p in (crashed / "weights").iterdir()) == [
        "v000001",
        "v000002",
        "v000003",
        "v000004",
    ]
    assert sorted(p.name for p in ckpts.iterdir()) == ["step_000002", "step_000004"]

    lines = (crashed / "trainer_metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [0, 1, 2, 2, 3]  # step 2 ran in both lives
    want, got = _metrics(straight), _metrics(crashed)
    for step in (2, 3):  # the steps after the resume: identical numbers
        for key in ("loss", "grad_norm", "entropy", "mismatch_kl", "stale_token_fraction"):
            assert got[step][key] == want[step][key], (step, key)
        # batch n holds samples of version n: the resumed trainer holds that version again
        assert got[step]["stale_token_fraction"] == 0.0 and got[step]["mismatch_kl"] > 0
    for version in (1, 2, 3, 4):
        assert state_dicts_equal(_weights(crashed, version), _weights(straight, version))
    assert not state_dicts_equal(_weights(crashed, 3), _weights(crashed, 4))


def test_no_checkpoint_older_than_start_version_is_used(tiny, batches, tmp_path):
    """A checkpoint directory whose newest checkpoint precedes start_version is ignored."""
    from swefleet.trainer.checkpoint import latest_checkpoint

    run_dir = tmp_path / "r"
    assert run(_job(tiny, batches, run_dir, 1, 1), StopFlag()) == 0
    assert latest_checkpoint(run_dir / "trainer_checkpoints")[0] == 1
    job = _job(tiny, batches, run_dir, 1, None).model_copy(update={"start_version": 2})
    assert run(job, StopFlag()) == 0  # trains batch 2 from the job's model, not version 1
    assert _metrics(run_dir)[2]["policy_version"] == 3


def test_without_checkpoints_it_continues_from_the_newest_published_version(
    tiny, batches, tmp_path
):
    run_dir = tmp_path / "r"
    assert run(_job(tiny, batches, run_dir, 2, None), StopFlag()) == 0
    assert run(_job(tiny, batches, run_dir, 3, None), StopFlag()) == 0  # restart: only step 2
    lines = (run_dir / "trainer_metrics.jsonl").read_text().splitlines()
    assert [json.loads(x)["step"] for x in lines] == [0, 1, 2]
    assert sorted(p.name for p in (run_dir / "weights").iterdir()) == [
        "v000001",
        "v000002",
        "v000003",
    ]
