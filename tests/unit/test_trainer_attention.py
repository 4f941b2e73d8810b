"""Attention kernel choice and float8 wiring on CPU: document masks from sample lengths, the
packed-kernel guard, the typed config, emulated float8 linears that keep the state dict."""

from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError
from swefleet.trainer import titan
from swefleet.trainer.attention import document_block_mask, document_causal_mask_mod, document_ids
from swefleet.trainer.config import TrainerConfig

from swefleet.tinymodel import create_tiny_model

pytestmark = pytest.mark.unit


def test_document_ids_come_from_sample_lengths():
    cu = torch.tensor([0, 3, 4, 8], dtype=torch.int32)
    assert document_ids(cu, 8).tolist() == [0, 0, 0, 1, 2, 2, 2, 2]


def test_document_causal_mask_is_causal_within_a_sample_only():
    cu = torch.tensor([0, 3, 5], dtype=torch.int32)
    mod = document_causal_mask_mod(document_ids(cu, 5))
    q, k = torch.meshgrid(torch.arange(5), torch.arange(5), indexing="ij")
    got = mod(0, 0, q, k)
    want = torch.tensor(
        [
            [1, 0, 0, 0, 0],
            [1, 1, 0, 0, 0],
            [1, 1, 1, 0, 0],
            [0, 0, 0, 1, 0],
            [0, 0, 0, 1, 1],
        ],
        dtype=torch.bool,
    )
    assert torch.equal(got, want)


def test_flex_block_mask_skips_blocks_across_samples():
    # two samples of 256 tokens, 128-token blocks: the 2nd sample's blocks never see the 1st's
    cu = torch.tensor([0, 256, 512], dtype=torch.int32)
    mask = document_block_mask(cu, 512)
    dense = mask.to_dense()[0, 0]  # [q blocks, kv blocks], 1 where any entry is kept
    assert dense.tolist() == [[1, 0, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0], [0, 0, 1, 1]]
    assert mask.seq_lengths == (512, 512)


def test_packed_kernels_need_cuda_and_map_to_torchtitan_attention():
    with pytest.raises(ValueError, match="needs a CUDA device"):
        titan.check_attention("flex", torch.device("cpu"))
    with pytest.raises(ValueError, match="one of"):
        titan.check_attention("fa3", torch.device("cpu"))
    titan.check_attention("sdpa", torch.device("cpu"))
    hf = {
        "model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "intermediate_size": 128, "vocab_size": 1024,
    }  # fmt: skip
    got = {a: titan.model_args_from_hf(hf, a).attn_type for a in titan.ATTENTIONS}
    # cudnn runs through the model's varlen path (its inner attention is swapped at load)
    assert got == {"sdpa": "sdpa", "varlen": "varlen", "flex": "flex", "cudnn": "varlen"}


def test_config_types_attention_and_float8():
    cfg = TrainerConfig(attention="flex", float8="rowwise", float8_filter="all")
    assert (cfg.attention, cfg.float8, cfg.float8_filter) == ("flex", "rowwise", "all")
    assert TrainerConfig().float8 == "none"
    with pytest.raises(ValidationError):
        TrainerConfig(float8="e5m2")
    with pytest.raises(ValidationError):
        TrainerConfig(attention="fa3")


def test_float8_swaps_block_linears_and_keeps_the_state_dict(tmp_path):
    pytest.importorskip("torchao")
    from torchao.float8.float8_linear import Float8Linear

    tiny = create_tiny_model(tmp_path / "tiny", seed=0)
    cpu = torch.device("cpu")
    plain = titan.load_policy(tiny, cpu, "sdpa")
    fp8 = titan.load_policy(tiny, cpu, "sdpa", float8="tensorwise", float8_filter="all")
    linears = [m for m in fp8.model.layers.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(isinstance(m, Float8Linear) for m in linears)
    assert not isinstance(fp8.model.output, Float8Linear)
    a, b = titan.hf_state_dict(plain), titan.hf_state_dict(fp8)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    x = torch.randint(0, 1024, (1, 32))
    rows, targets = torch.arange(31), x[0, 1:]
    ref, _ = titan.policy_logprobs(plain, x, None, None, rows, targets, chunk_size=16)
    got, _ = titan.policy_logprobs(fp8, x, None, None, rows, targets, chunk_size=16)
    got.sum().backward()
    assert fp8.model.layers["0"].feed_forward.w1.weight.grad is not None
    assert not torch.equal(ref, got)  # the linears really ran in float8 (emulated)
    assert torch.allclose(ref, got, atol=0.5)  # ... and still compute the same function
    with pytest.raises(ValueError, match="only the emulated tensorwise"):
        titan.load_policy(tiny, cpu, "sdpa", float8="rowwise")


def test_float8_grad_fast_accum_reaches_every_converted_linear(tmp_path):
    pytest.importorskip("torchao")
    from torchao.float8.float8_linear import Float8Linear

    tiny = create_tiny_model(tmp_path / "tiny", seed=0)
    cpu = torch.device("cpu")

    def accum(policy):
        linears = [m for m in policy.model.layers.modules() if isinstance(m, Float8Linear)]
        assert linears
        return {
            (c.gemm_config_output.use_fast_accum, c.gemm_config_grad_input.use_fast_accum,
             c.gemm_config_grad_weight.use_fast_accum)
            for c in (m.config for m in linears)
        }  # fmt: skip

    default = titan.load_policy(tiny, cpu, "sdpa", float8="tensorwise", float8_filter="all")
    assert accum(default) == {(True, False, False)}  # torchao: fast accumulation forward only
    fast = titan.load_policy(tiny, cpu, "sdpa", float8="tensorwise", float8_filter="all",
                             float8_grad_fast_accum=True)  # fmt: skip
    assert accum(fast) == {(True, True, True)}
