"""Golden losses: a fixed tiny run (seeded model, fixed packed batches, 4 DAPO steps on CPU in
float32) must reproduce the losses, grad norms and mismatch KL stored in
`tests/data/trainer_golden.json`. A change that moves them is a change in what the trainer
computes: if it is intended, regenerate the file and say why in the commit:

    SWEFLEET_REGEN_GOLDEN=1 .venv/bin/pytest tests/unit/test_trainer_golden.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from swefleet.trainer.config import TrainerConfig
from swefleet.trainer.step import build_optimizer, train_step
from swefleet.trainer.titan import load_policy

from swefleet.batch import pack_samples

pytestmark = pytest.mark.unit
GOLDEN = Path(__file__).resolve().parents[1] / "data" / "trainer_golden.json"
KEYS = ("loss", "grad_norm", "mismatch_kl", "entropy", "clip_fraction")
STEPS, VOCAB = 4, 128


def _model(tmp: Path) -> Path:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                         vocab_size=VOCAB, tie_word_embeddings=True, max_position_embeddings=256)
    torch.manual_seed(1234)
    Qwen3ForCausalLM(config).save_pretrained(tmp)
    return tmp


def _batch(step: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(step)
    samples = []
    for i, length in enumerate((24, 17, 31)):
        prompt = 5 + i
        samples.append({
            "tokens": rng.integers(3, VOCAB, length).tolist(),
            "loss_mask": [False] * prompt + [True] * (length - prompt),
            "inference_logprobs": [0.0] * prompt + (-4.9 + 0.1 * rng.standard_normal(length - prompt)).tolist(),
            "advantage": (1.0, -0.5, 0.25)[i],
            "policy_version": 0,
        })
    return pack_samples(samples)


def run_fixed(tmp: Path) -> list[dict[str, float]]:
    torch.manual_seed(0)
    cfg = TrainerConfig(device="cpu", lr=1e-3, micro_batch_tokens=48)
    policy = load_policy(_model(tmp), torch.device("cpu"), "sdpa")
    optimizer = build_optimizer(policy, cfg)
    out = []
    for step in range(STEPS):
        metrics = train_step(policy, optimizer, _batch(step), cfg)
        out.append({k: float(metrics[k]) for k in KEYS})
    return out


def test_fixed_tiny_run_matches_the_golden_losses(tmp_path):
    got = run_fixed(tmp_path)
    if os.environ.get("SWEFLEET_REGEN_GOLDEN"):
        GOLDEN.write_text(json.dumps({"steps": got, "torch": torch.__version__}, indent=1) + "\n")
        pytest.skip(f"regenerated {GOLDEN}")
    want = json.loads(GOLDEN.read_text())["steps"]
    assert len(got) == len(want) == STEPS
    for step, (g, w) in enumerate(zip(got, want)):
        for key in KEYS:
            assert g[key] == pytest.approx(w[key], rel=1e-4, abs=1e-6), (step, key, g, w)
    assert got[0]["loss"] != got[-1]["loss"]  # the run really updates the weights


def test_adam_eps_reaches_the_optimizer_and_damps_small_gradient_updates(tmp_path):
    """`trainer.eps` is AdamW's epsilon: with it far above the gradients, the first update is
    a scaled gradient, not ~lr * sign(gradient) for every weight."""
    moved = {}
    for eps in (1e-8, 1.0):
        cfg = TrainerConfig(device="cpu", lr=1e-3, eps=eps, micro_batch_tokens=48)
        policy = load_policy(_model(tmp_path / str(eps)), torch.device("cpu"), "sdpa")
        optimizer = build_optimizer(policy, cfg)
        assert optimizer.param_groups[0]["eps"] == eps
        before = [p.detach().clone() for p in policy.model.parameters()]
        train_step(policy, optimizer, _batch(0), cfg)
        moved[eps] = max(float((p.detach() - b).abs().max())
                         for p, b in zip(policy.model.parameters(), before))
    assert moved[1e-8] == pytest.approx(1e-3, rel=0.05)  # sign-like: the largest step is lr
    assert moved[1.0] < 1e-4
