"""FlexAttention with the document-causal block mask (from sample lengths) and the cuDNN
per-sample packed attention (`trainer.packed_attention`) agree with FlashAttention-2 varlen on
packed samples of uneven lengths: outputs and gradients, GQA; also under torch.compile."""

from __future__ import annotations

import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
LENGTHS = [1, 100, 3000, 900, 129]


def _inputs(hq=16, hkv=8, d=128, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    t = sum(LENGTHS)
    q, k, v = (
        torch.randn(t, h, d, device="cuda", dtype=torch.bfloat16, generator=g).requires_grad_()
        for h in (hq, hkv, hkv)
    )
    cu = torch.tensor([0, *torch.tensor(LENGTHS).cumsum(0).tolist()], device="cuda")
    return q, k, v, cu.to(torch.int32), max(LENGTHS)


def _flash(q, k, v, cu, max_len):
    from torch.nn.attention.varlen import varlen_attn

    return varlen_attn(q, k, v, cu, cu, max_len, max_len, window_size=(-1, 0))


def _grads(fn, q, k, v, cu, max_len):
    out = fn(q, k, v, cu, max_len)
    g = torch.randn_like(out, generator=torch.Generator(device="cuda").manual_seed(1))
    dq, dk, dv = torch.autograd.grad(out, (q, k, v), g)
    return out, dq, dk, dv


def test_flex_document_mask_matches_flash_varlen():
    from swefleet.trainer.attention import document_block_mask
    from torch.nn.attention.flex_attention import flex_attention

    q, k, v, cu, max_len = _inputs()
    mask = document_block_mask(cu, q.shape[0])
    flex = torch.compile(flex_attention, dynamic=False)

    def fn(q, k, v, cu, max_len):
        x = [t.transpose(0, 1).unsqueeze(0) for t in (q, k, v)]  # [1, heads, T, d]
        return flex(*x, block_mask=mask, enable_gqa=True)[0].transpose(0, 1)

    for got, want in zip(_grads(fn, q, k, v, cu, max_len), _grads(_flash, q, k, v, cu, max_len)):
        err = (got.float() - want.float()).abs().max().item()
        assert err < 2e-2 * max(1.0, want.float().abs().max().item()), err


@pytest.mark.parametrize("compiled", [False, True])
def test_cudnn_packed_attention_matches_flash_varlen(compiled):
    from swefleet.trainer.packed_attention import packed_attention, plan_segments

    q, k, v, cu, max_len = _inputs()
    cu_host = cu.cpu()
    kernels = [seg[0] for seg in plan_segments(cu_host.tolist(), 1024)]
    assert kernels == ["flash", "cudnn", "flash"], kernels  # both kernels are exercised

    def fn(q, k, v, cu, max_len):
        return packed_attention(q, k, v, cu_host, q.shape[-1] ** -0.5, 1024)[0]

    run = torch.compile(fn, fullgraph=True) if compiled else fn
    for got, want in zip(_grads(run, q, k, v, cu, max_len), _grads(_flash, q, k, v, cu, max_len)):
        assert torch.isfinite(got).all()
        err = (got.float() - want.float()).abs().max().item()
        assert err < 2e-2 * max(1.0, want.float().abs().max().item()), err


def test_cudnn_packed_attention_all_long_and_all_short():
    """Every sample on cuDNN (a 1-token sample stays on FA2: cuDNN refuses it) and every sample
    on FA2 (threshold above all lengths)."""
    from swefleet.trainer.packed_attention import packed_attention

    q, k, v, cu, max_len = _inputs(seed=2)
    want = _grads(_flash, q, k, v, cu, max_len)
    for min_len in (1, 10**6):

        def fn(q, k, v, cu, max_len, min_len=min_len):
            return packed_attention(q, k, v, cu.cpu(), q.shape[-1] ** -0.5, min_len)[0]

        for got, ref in zip(_grads(fn, q, k, v, cu, max_len), want):
            err = (got.float() - ref.float()).abs().max().item()
            assert err < 2e-2 * max(1.0, ref.float().abs().max().item()), (min_len, err)
