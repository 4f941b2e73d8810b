"""Fused projections of the static path: one GEMM, the modules' weights become views of it."""

from __future__ import annotations

import pytest
import torch
from swefleet.inference.engine.fused import FusedLinear, can_fuse

pytestmark = pytest.mark.unit


def test_fused_linear_equals_separate_and_follows_weight_updates():
    torch.manual_seed(0)
    lins = [torch.nn.Linear(8, n, bias=True) for n in (6, 3, 3)]
    x = torch.randn(2, 5, 8)
    expected = [lin(x) for lin in lins]
    assert can_fuse(lins) and not can_fuse([lins[0], torch.nn.Linear(8, 3, bias=False)])
    fused = FusedLinear(lins)
    for a, b in zip(fused(x), expected, strict=True):
        assert torch.allclose(a, b, atol=1e-6)
    with torch.no_grad():
        lins[1].weight.copy_(torch.ones(3, 8))  # in place (apply_weights): seen at once
    assert torch.allclose(fused(x)[1], lins[1](x))
    lins[2].weight = torch.nn.Parameter(torch.full((3, 8), 2.0))  # replaced: seen after refresh
    assert not torch.allclose(fused(x)[2], lins[2](x))
    fused.refresh()
    assert torch.allclose(fused(x)[2], lins[2](x), atol=1e-6)
    assert lins[2].weight.data_ptr() == fused.weight[9:].data_ptr()
