"""Qwen3-MoE in the trainer: the HF mapping is exact, and router replay (R3) routes with the
given experts while the gate keeps its gradient."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from swefleet.trainer import router_replay
from swefleet.trainer.config import TrainerConfig
from swefleet.trainer.forward import batch_logprobs
from swefleet.trainer.step import build_optimizer, train_step
from swefleet.trainer.titan import load_policy, policy_logprobs

from swefleet.batch import pack_samples

pytestmark = pytest.mark.unit
N_EXPERTS, TOP_K, LAYERS = 8, 2, 2


@pytest.fixture(scope="module")
def moe(tmp_path_factory) -> Path:
    """Tiny random Qwen3-MoE with large weights (routing and log-probs far from uniform)."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    config = Qwen3MoeConfig(
        hidden_size=64,
        intermediate_size=128,
        moe_intermediate_size=32,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        vocab_size=256,
        num_experts=N_EXPERTS,
        num_experts_per_tok=TOP_K,
        norm_topk_prob=True,
        tie_word_embeddings=False,
        max_position_embeddings=1024,
    )
    torch.manual_seed(0)
    model = Qwen3MoeForCausalLM(config)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.copy_(1 + 0.3 * torch.randn_like(p))
            else:
                p.copy_(2 * torch.randn_like(p) / p.shape[-1] ** 0.5)
    out = tmp_path_factory.mktemp("moe")
    model.save_pretrained(out)
    return out


def _tokens(rows=2, length=16, seed=0):
    return torch.randint(3, 256, (rows, length), generator=torch.Generator().manual_seed(seed))


def _logp(policy, x):
    rows = torch.arange(x.numel()).view(x.shape)[:, :-1].reshape(-1)
    return policy_logprobs(policy, x, None, None, rows, x[:, 1:].reshape(-1), chunk_size=8)[0]


def test_moe_logprobs_match_transformers_and_export_round_trips(moe, tmp_path):
    from safetensors.torch import load_file
    from swefleet.trainer.export import export_hf, state_dicts_equal
    from transformers import AutoModelForCausalLM

    x = _tokens()
    hf = AutoModelForCausalLM.from_pretrained(moe, dtype=torch.float32)
    policy = load_policy(moe, torch.device("cpu"), "sdpa")
    with torch.no_grad():
        ref = torch.log_softmax(hf(x).logits, -1)[:, :-1].gather(-1, x[:, 1:, None])
        got = _logp(policy, x)
    assert ref.std() > 1.0
    assert (got - ref.reshape(-1)).abs().max() < 1e-4
    out = export_hf(policy, tmp_path / "v1")
    exported = load_file(out / "model.safetensors")
    assert state_dicts_equal(exported, load_file(moe / "model.safetensors"))


def test_replaying_own_routing_is_exact_and_other_experts_change_logits(moe):
    policy = load_policy(moe, torch.device("cpu"), "sdpa")
    x = _tokens()
    with torch.no_grad():
        own = _logp(policy, x)
    routing = router_replay.recorded_routing(policy.model)
    assert routing.shape == (x.numel(), LAYERS, TOP_K)

    router_replay.set_replay(policy.model, routing)
    with torch.no_grad():
        replayed = _logp(policy, x)
    assert (replayed - own).abs().max().item() == 0.0

    forced = (routing + 3) % N_EXPERTS  # other experts, still TOP_K distinct per token
    router_replay.set_replay(policy.model, forced)
    logp = _logp(policy, x)
    assert torch.equal(router_replay.recorded_routing(policy.model), forced)
    assert (logp.detach() - own).abs().max() > 1e-2
    logp.sum().backward()
    for layer in router_replay.moe_layers(policy.model):
        grad = layer.router.gate.weight.grad
        assert grad is not None and torch.isfinite(grad).all() and grad.abs().sum() > 0
    router_replay.set_replay(policy.model, None)
    with torch.no_grad():
        assert torch.equal(_logp(policy, x), own)  # cleared: own top-k again


def test_batch_routed_experts_are_replayed_through_recomputation(moe):
    """`routed_experts` in a batch: own routing changes nothing; forced routing gives the same
    step with and without activation checkpointing (replay stays on for the recompute)."""
    x = _tokens(rows=3, length=12, seed=1)
    samples = [
        {
            "tokens": row.tolist(),
            "loss_mask": [False] * 2 + [True] * 10,
            "inference_logprobs": [0.0] * 2 + [-4.0] * 10,
            "advantage": a,
            "policy_version": 0,
        }
        for row, a in zip(x, [1.0, -1.0, 0.5])
    ]
    arrays = pack_samples(samples)
    plain = load_policy(moe, torch.device("cpu"), "sdpa")
    base = batch_logprobs(plain, arrays)
    own = router_replay.recorded_routing(plain.model).numpy().astype(np.uint8)  # like vLLM's
    assert np.array_equal(batch_logprobs(plain, {**arrays, "routed_experts": own}), base)
    forced = {**arrays, "routed_experts": (own + 1) % N_EXPERTS}
    assert np.abs(batch_logprobs(plain, forced) - base).max() > 1e-2

    cfg = TrainerConfig(device="cpu", lr=1e-3, micro_batch_tokens=24)
    steps = []
    for ac in ("none", "full"):
        policy = load_policy(moe, torch.device("cpu"), "sdpa", activation_checkpointing=ac)
        steps.append(train_step(policy, build_optimizer(policy, cfg), forced, cfg))
    assert steps[0]["loss"] == pytest.approx(steps[1]["loss"], rel=1e-6)
    assert steps[0]["grad_norm"] == pytest.approx(steps[1]["grad_norm"], rel=1e-5)
    with pytest.raises(ValueError, match="routed_experts shape"):
        batch_logprobs(plain, {**arrays, "routed_experts": own[:, :1]})
