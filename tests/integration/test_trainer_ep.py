"""Expert parallelism on CPU: two `python -m swefleet.trainer.main` ranks (gloo; the environment torchrun
would set) with `expert_parallel=2` train a tiny Qwen3-MoE like one process does (same losses,
expert loads, full-size exported weights), one step replaying given routed experts, and their
DCP checkpoint (experts sharded by expert) resumes in one process and on two EP ranks."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from swefleet.trainer.config import TrainerJob
from swefleet.trainer.main import StopFlag, run
from swefleet.trainer.replay_check import SHAPES, make_moe_checkpoint

from swefleet import routed_experts
from swefleet.batch import batch_path, pack_samples, weights_path, write_batch
from tests.trainer_ranks import (
    finish,
    launch_trainer_ranks,
    rl_sample,
    trainer_job,
    trainer_records,
)

pytestmark = pytest.mark.integration
SHAPE = SHAPES["tiny"]  # 8 experts, top 2, 2 layers, vocab 256
E, K, L = SHAPE["num_experts"], SHAPE["num_experts_per_tok"], SHAPE["num_hidden_layers"]
REPLAYED_STEP = 1


@pytest.fixture(scope="module")
def moe(tmp_path_factory) -> Path:
    return make_moe_checkpoint(tmp_path_factory.mktemp("moe") / "tiny", "tiny", gain=1.0)


def _routing(rng: np.random.Generator, n: int) -> np.ndarray:
    """Random distinct top-k expert ids per token and layer: [n, layers, top_k] uint8."""
    return np.argsort(rng.random((n, L, E)), axis=-1)[..., :K].astype(np.uint8)


def _batches(out: Path) -> Path:
    """Steps 0-2, 5 samples of uneven lengths (the ranks get different micro-batch counts);
    step REPLAYED_STEP carries routed experts."""
    out.mkdir()
    rng = np.random.default_rng(3)
    for step in range(3):
        samples = []
        for i, n in enumerate([9, 31, 12, 7, 26]):
            sample = rl_sample(rng, n, SHAPE["vocab_size"], prompt=2, mean_logp=-5, i=i,
                               version=step)  # fmt: skip
            if step == REPLAYED_STEP:
                sample["routed_experts"] = _routing(rng, n)
            samples.append(sample)
        write_batch(batch_path(out, step), pack_samples(samples), {"step": step})
    return out


def _job(model: Path, batches: Path, run_dir: Path, max_steps: int, ep: int) -> dict:
    return trainer_job(model, batches, run_dir, max_steps, ranks=ep, expert_parallel=ep,
                       checkpoint_every=1 if ep > 1 else None, profile_moe=ep > 1)  # fmt: skip


def _weights(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(path / "model.safetensors")


def _assert_same_step(got: dict, want: dict) -> None:
    for key in ("loss", "grad_norm", "entropy", "clip_fraction", "mismatch_kl",
                "stale_token_fraction"):
        assert got[key] == pytest.approx(want[key], rel=1e-5, abs=1e-7), key
    assert got["moe_load"] == want["moe_load"] and got["moe_replay"] == want["moe_replay"]


def _assert_close_weights(got: dict, want: dict) -> None:
    assert got.keys() == want.keys()
    for k, value in got.items():
        # Adam's first updates are +-lr (3e-3) per element; a coordinate whose gradient is
        # ~0 may move by a few 1e-6 under another summation order
        torch.testing.assert_close(value, want[k], rtol=1e-4, atol=3e-5)


def test_two_rank_expert_parallel_matches_one_process_and_resumes(moe, tmp_path):
    batches = _batches(tmp_path / "batches")
    single, ep = tmp_path / "single", tmp_path / "ep"
    (tmp_path / "ep.json").write_text(json.dumps(_job(moe, batches, ep, 2, ep=2)))
    procs = launch_trainer_ranks(tmp_path / "ep.json", OMP_NUM_THREADS="1")
    # meanwhile, the same three steps in this process (no EP, no FSDP)
    assert run(TrainerJob.model_validate(_job(moe, batches, single, 3, ep=1)), StopFlag()) == 0
    outs = finish(procs)
    assert "on cpu x2" in outs[0] and "expert parallel x2" in outs[0]

    want, got = trainer_records(single), trainer_records(ep)
    assert sorted(got) == [0, 1]
    # MoE phase timing under EP: dispatch / combine include the all-to-alls, per layer
    for phase in ("route", "dispatch", "experts", "combine"):
        assert got[0][f"moe/{phase}_ms"] > 0, phase
        assert got[0][f"moe/layer{L - 1}/{phase}_ms"] > 0, phase
    for step in (0, 1):
        _assert_same_step(got[step], want[step])
    replayed = np.load(batch_path(batches, REPLAYED_STEP))["routed_experts"]
    assert got[REPLAYED_STEP]["moe_replay"] == 1.0
    assert got[REPLAYED_STEP]["moe_load"] == routed_experts.expert_load(replayed, E).tolist()

    source = _weights(moe)
    for version in (1, 2):
        exported = _weights(weights_path(ep / "weights", version))
        assert {k: v.shape for k, v in exported.items()} == {k: v.shape for k, v in source.items()}
        _assert_close_weights(exported, _weights(weights_path(single / "weights", version)))
    shards = sorted(p.name for p in (ep / "trainer_checkpoints" / "step_000002").iterdir())
    assert shards == [".metadata", "__0_0.distcp", "__1_0.distcp", "swefleet_checkpoint.json"]

    # the EP checkpoint (weights + Adam state, experts split by expert) resumes in one process
    one = tmp_path / "ep_to_one"
    shutil.copytree(ep, one)
    job = _job(moe, batches, one, 3, ep=1)
    assert run(TrainerJob.model_validate(job), StopFlag()) == 0
    _assert_same_step(trainer_records(one)[2], want[2])
    v3 = _weights(weights_path(single / "weights", 3))
    _assert_close_weights(_weights(weights_path(one / "weights", 3)), v3)  # Adam state too
    # ... and on two EP ranks
    (tmp_path / "ep3.json").write_text(json.dumps(_job(moe, batches, ep, 3, ep=2)))
    outs = finish(launch_trainer_ranks(tmp_path / "ep3.json", OMP_NUM_THREADS="1"))
    assert "resumed from" in outs[0]
    _assert_same_step(trainer_records(ep)[2], want[2])
    _assert_close_weights(_weights(weights_path(ep / "weights", 3)), v3)
