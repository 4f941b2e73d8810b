"""The segment plan of the cuDNN packed attention (which samples go to cuDNN one by one, which
runs of short samples go to FA2 varlen together), and its CPU guard rails."""

from __future__ import annotations

from itertools import pairwise

import pytest
import torch

from trainer.packed_attention import PackedCudnnAttention, plan_segments

pytestmark = pytest.mark.unit


def test_long_samples_alone_short_runs_together():
    cu = [0, 100, 5000, 5100, 5200, 9000, 9001]
    assert plan_segments(cu, 1024) == [
        ("flash", 0, 100, [0, 100]),
        ("cudnn", 100, 5000, [0, 4900]),
        ("flash", 5000, 5200, [0, 100, 200]),
        ("cudnn", 5200, 9000, [0, 3800]),
        ("flash", 9000, 9001, [0, 1]),
    ]


def test_plan_covers_every_token_once_for_any_threshold():
    cu = [0, 3, 3, 2000, 2001, 2050, 4096, 4100]
    for threshold in (1, 2, 50, 1024, 10**6):
        covered = []
        for _, s, e, local in plan_segments(cu, threshold):
            assert local[0] == 0 and local[-1] == e - s
            assert all(a <= b for a, b in pairwise(local))
            covered.extend(range(s, e))
        assert covered == list(range(cu[-1])), threshold


def test_empty_samples_are_skipped_and_threshold_is_inclusive():
    assert plan_segments([0, 0, 1024, 1024], 1024) == [("cudnn", 0, 1024, [0, 1024])]
    assert plan_segments([0, 10, 10, 20], 1024) == [("flash", 0, 20, [0, 10, 20])]
    assert plan_segments([0], 1024) == []


def test_boundaries_on_the_gpu_are_refused():
    from types import SimpleNamespace

    x = torch.zeros(1, 2, 4, 8)
    meta = SimpleNamespace(cu_seq_k=torch.zeros(2, dtype=torch.int32, device="meta"))
    with pytest.raises(ValueError, match="on the CPU"):
        PackedCudnnAttention()(x, x, x, meta)


def test_cudnn_attention_needs_cuda():
    from trainer.titan import check_attention

    with pytest.raises(ValueError, match="needs a CUDA device"):
        check_attention("cudnn", torch.device("cpu"))


def test_one_token_samples_never_go_to_cudnn():
    assert plan_segments([0, 1, 3], 1) == [("flash", 0, 1, [0, 1]), ("cudnn", 1, 3, [0, 2])]
