"""The chunked lm_head log-prob: values, entropy and both gradients against full-logits autograd."""

from __future__ import annotations

import pytest
import torch
from swefleet.trainer.logprobs import token_logprobs

pytestmark = pytest.mark.unit


def _inputs(n=37, dim=16, vocab=50, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    h = torch.randn(n, dim, generator=g, dtype=dtype, requires_grad=True)
    w = (torch.randn(vocab, dim, generator=g, dtype=dtype) / 2).requires_grad_()
    t = torch.randint(0, vocab, (n,), generator=g)
    return h, w, t


def test_fp32_path_passes_gradcheck_and_matches_full_logits():
    h, w, t = _inputs(n=7, dim=4, vocab=9)
    assert torch.autograd.gradcheck(
        lambda h, w: token_logprobs(h, w, t, chunk_size=3)[0], (h, w), eps=1e-6, atol=1e-6
    )
    h, w, t = _inputs()
    logp, entropy = token_logprobs(h, w, t, chunk_size=8)
    full = torch.log_softmax(h @ w.t(), -1)
    assert torch.allclose(logp, full.gather(-1, t[:, None])[:, 0], atol=1e-12)
    assert torch.allclose(entropy, -(full.exp() * full).sum(-1), atol=1e-12)
    assert not entropy.requires_grad


def test_bf16_path_keeps_probs_and_its_gradients_match_fp32():
    h, w, t = _inputs(n=64, dim=32, vocab=300, dtype=torch.float32)
    adv = torch.randn(64, generator=torch.Generator().manual_seed(1))
    ref = torch.log_softmax(h @ w.t(), -1).gather(-1, t[:, None])[:, 0]
    ref_grads = torch.autograd.grad((ref * adv).sum(), (h, w))
    got, _ = token_logprobs(h, w, t, chunk_size=24, matmul_dtype=torch.bfloat16)
    assert got.dtype == torch.float32 and (got - ref).abs().max() < 0.05
    grads = torch.autograd.grad((got * adv).sum(), (h, w))
    for a, b in zip(grads, ref_grads):
        assert a.dtype == torch.float32
        assert (a - b).norm() / b.norm() < 2e-2


def test_no_rows_and_row_count_mismatch():
    h, w, t = _inputs()
    logp, entropy = token_logprobs(h[:0], w, t[:0], chunk_size=8)
    assert logp.shape == entropy.shape == (0,)
    logp.sum().backward()  # an empty micro-batch still backpropagates (FSDP fillers)
    with pytest.raises(ValueError, match="targets"):
        token_logprobs(h, w, t[:3], chunk_size=8)
