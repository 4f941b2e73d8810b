"""The segment plan of the cuDNN packed attention (which samples go to cuDNN one by one, which
runs of short samples go to FA2 varlen together), and its CPU guard rails."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pytest
import torch
from swefleet.trainer.packed_attention import HostBoundaries, PackedCudnnAttention, plan_segments

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
    with pytest.raises(TypeError, match="on the CPU"):
        PackedCudnnAttention()(x, x, x, meta)
    with pytest.raises(ValueError, match="CPU tensor"):
        HostBoundaries(torch.zeros(2, dtype=torch.int32, device="meta"))


def test_host_boundaries_survive_fsdps_input_move():
    """FSDP2's root forward moves the model's inputs with `torch.distributed.utils._to_kwargs`
    (namedtuple fields included): the cudnn metadata's host boundaries must stay on the CPU
    while the varlen boundaries move. Moved to `meta` here (no GPU in CI)."""
    from swefleet.trainer.titan import packed_attention_masks
    from torch.distributed.utils import _to_kwargs

    cu = torch.tensor([0, 3, 8], dtype=torch.int32)
    masks = packed_attention_masks("cudnn", cu, 5, 8)
    _, kwargs = _to_kwargs((), {"attention_masks": masks}, torch.device("meta"), False)
    moved = kwargs[0]["attention_masks"]
    assert moved.cu_seq_q.device.type == "meta"
    assert moved.cu_seq_k.cpu_tensor.device.type == "cpu"
    assert moved.cu_seq_k.cpu_tensor.tolist() == [0, 3, 8]


def test_cudnn_attention_needs_cuda():
    from swefleet.trainer.titan import check_attention

    with pytest.raises(ValueError, match="needs a CUDA device"):
        check_attention("cudnn", torch.device("cpu"))


def test_one_token_samples_never_go_to_cudnn():
    assert plan_segments([0, 1, 3], 1) == [("flash", 0, 1, [0, 1]), ("cudnn", 1, 3, [0, 2])]


# The op's assembly (segment plan -> kernels -> output / logsumexp / gradients in place) and its
# cuDNN fallback, on CPU: the GPU kernels are swapped for an exact fp32 reference.


def _reference_forward(q, k, v, cu_local, scale):
    """Causal attention per sample (GQA) in fp32: (out [T, Hq, d], logsumexp [Hq, T])."""
    outs, lses = [], []
    for s, e in pairwise(cu_local):
        qs, ks, vs = (x[s:e].transpose(0, 1).float() for x in (q, k, v))
        rep = qs.shape[0] // ks.shape[0]
        ks, vs = ks.repeat_interleave(rep, 0), vs.repeat_interleave(rep, 0)
        scores = (qs @ ks.transpose(-1, -2)) * scale
        future = torch.ones(e - s, e - s, dtype=torch.bool).triu(1)
        scores = scores.masked_fill(future, float("-inf"))
        lse = scores.logsumexp(-1)
        outs.append(((scores - lse[..., None]).exp() @ vs).transpose(0, 1).to(q.dtype))
        lses.append(lse)
    return torch.cat(outs), torch.cat(lses, dim=1)


def _reference_backward(grad_out, q, k, v, out, lse, cu_local, scale):
    """Analytic gradients of `_reference_forward` (autograd is off inside a custom op)."""
    dq, dk, dv = (torch.zeros_like(x) for x in (q, k, v))
    for s, e in pairwise(cu_local):
        qs, ks, vs, go = (x[s:e].transpose(0, 1).float() for x in (q, k, v, grad_out))
        hkv, rep = ks.shape[0], qs.shape[0] // ks.shape[0]
        ks, vs = ks.repeat_interleave(rep, 0), vs.repeat_interleave(rep, 0)
        future = torch.ones(e - s, e - s, dtype=torch.bool).triu(1)
        p = ((qs @ ks.transpose(-1, -2)) * scale).masked_fill(future, float("-inf")).softmax(-1)
        o = p @ vs
        ds = p * (go @ vs.transpose(-1, -2) - (go * o).sum(-1, keepdim=True))
        dq[s:e] = (scale * ds @ ks).transpose(0, 1)
        dk[s:e] = (scale * ds.transpose(-1, -2) @ qs).unflatten(0, (hkv, rep)).sum(1).transpose(0, 1)
        dv[s:e] = (p.transpose(-1, -2) @ go).unflatten(0, (hkv, rep)).sum(1).transpose(0, 1)
    return dq, dk, dv


@pytest.fixture
def cpu_kernels(monkeypatch):
    """Both kernels replaced by the reference; records (kernel, segment length) per call."""
    from swefleet.trainer import packed_attention as pa

    calls = []

    def kernel(name, fn):
        def run(q, *args):
            calls.append((name, fn.__name__, q.shape[0]))
            return fn(q, *args)

        return run

    monkeypatch.setattr(pa, "KERNELS", {
        name: (kernel(name, _reference_forward), kernel(name, _reference_backward))
        for name in ("cudnn", "flash")
    })  # fmt: skip
    monkeypatch.setattr(pa, "_CUDNN_USABLE", [True])
    return calls


def _packed_inputs(lengths, hq=4, hkv=2, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    t = sum(lengths)
    q, k, v = (torch.randn(t, h, d, generator=g, requires_grad=True) for h in (hq, hkv, hkv))
    cu = torch.tensor([0, *np.cumsum(lengths).tolist()], dtype=torch.int32)
    return q, k, v, cu


def _run(fn, q, k, v, cu, seed=1):
    out = fn(q, k, v, cu)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(seed))
    return (out, *torch.autograd.grad(out, (q, k, v), g))


def test_segments_assemble_to_whole_batch_attention(cpu_kernels):
    from swefleet.trainer.packed_attention import packed_attention

    lengths = [5, 40, 3, 2, 33, 1]
    q, k, v, cu = _packed_inputs(lengths)
    got = _run(lambda *a: packed_attention(*a[:3], a[3], 0.3, 30)[0], q, k, v, cu)
    want = _run(lambda *a: _reference_forward(*a[:3], a[3].tolist(), 0.3)[0], q, k, v, cu)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    forward = [(name, n) for name, fn, n in cpu_kernels if fn == "_reference_forward"]
    assert forward == [("flash", 5), ("cudnn", 40), ("flash", 5), ("cudnn", 33), ("flash", 1)]


def test_cudnn_refusal_falls_back_to_flash_for_good(cpu_kernels, monkeypatch, caplog):
    from swefleet.trainer import packed_attention as pa

    def refuse(*args):
        raise RuntimeError("cuDNN Frontend error: s_q = s_kv = 1 is not supported.")

    monkeypatch.setitem(pa.KERNELS, "cudnn", (refuse, refuse))
    q, k, v, cu = _packed_inputs([40, 7, 33])
    with caplog.at_level("WARNING"):
        got = _run(lambda *a: pa.packed_attention(*a[:3], a[3], 0.3, 30)[0], q, k, v, cu)
    want = _run(lambda *a: _reference_forward(*a[:3], a[3].tolist(), 0.3)[0], q, k, v, cu)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
    assert pa._CUDNN_USABLE == [False] and "FA2 varlen from now on" in caplog.text
    assert {name for name, _, _ in cpu_kernels} == {"flash"}


def test_other_kernel_errors_propagate(cpu_kernels, monkeypatch):
    from swefleet.trainer import packed_attention as pa

    def broken(*args):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setitem(pa.KERNELS, "cudnn", (broken, broken))
    q, k, v, cu = _packed_inputs([40])
    with pytest.raises(RuntimeError, match="illegal memory access"):
        pa.packed_attention(q, k, v, cu, 0.3, 30)
    assert pa._CUDNN_USABLE == [True]
