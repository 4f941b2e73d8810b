"""MoE phase timing: every layer's forward is split into route/dispatch/experts/combine, the
phases add up to the layer's time, and recomputation in backward is not counted twice."""

from __future__ import annotations

import pytest
import torch
from swefleet.trainer.moe_profile import PHASES, MoEPhaseTimer
from swefleet.trainer.titan import load_policy, policy_logprobs

pytestmark = pytest.mark.unit
LAYERS = 2


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory):
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    config = Qwen3MoeConfig(hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
                            num_hidden_layers=LAYERS, num_attention_heads=4, num_key_value_heads=2,
                            head_dim=16, vocab_size=256, num_experts=8, num_experts_per_tok=2,
                            tie_word_embeddings=False, max_position_embeddings=512)
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("moe")
    Qwen3MoeForCausalLM(config).save_pretrained(out)
    return out


def _forward_backward(policy, rows=2, length=64):
    x = torch.randint(3, 256, (rows, length), generator=torch.Generator().manual_seed(0))
    flat = torch.arange(x.numel()).view(x.shape)[:, :-1].reshape(-1)
    logp, _ = policy_logprobs(policy, x, None, None, flat, x[:, 1:].reshape(-1), chunk_size=32)
    logp.sum().backward()


@pytest.mark.parametrize("ac", ["none", "full"])
def test_each_layer_is_split_into_phases_once_per_forward(moe_dir, ac):
    policy = load_policy(moe_dir, torch.device("cpu"), "sdpa", activation_checkpointing=ac)
    timer = MoEPhaseTimer(policy.model)
    assert len(timer.layers) == LAYERS
    _forward_backward(policy)
    got = timer.take()
    assert got["moe/forward_calls"] == LAYERS  # AC recompute during backward is not counted
    for i in range(LAYERS):
        per = {p: got[f"moe/layer{i}/{p}_ms"] for p in PHASES}
        assert per["route"] > 0 and per["dispatch"] > 0 and per["experts"] > 0
        assert per["combine"] > 0 and per["shared"] == 0  # Qwen3-MoE has no shared experts
    assert got["moe/experts_ms"] == pytest.approx(
        sum(got[f"moe/layer{i}/experts_ms"] for i in range(LAYERS)))
    assert timer.take() == {}  # reset after take
    timer.remove()
    _forward_backward(policy)
    assert timer.take() == {}  # hooks removed
