"""Packed causal attention for RL micro-batches on Hopper: long samples through cuDNN's fused
attention (one call per sample), runs of short samples through FlashAttention-2 varlen (one call
per run). Sample boundaries come from cu_seqlens, never from EOS tokens.

Why: on the H200, torch 2.11's FlashAttention-2 runs the Qwen3-1.7B attention at ~240 TFLOP/s
(forward + backward), cuDNN's at ~1.6x that; attention is ~40 % of an 8k-token RL step. torch's
own ragged cuDNN path (`varlen_attn`) is switched off in 2.11 and its backward is broken (see
`trainer/attention.py`), so each long sample gets the dense cuDNN kernel (causal, no padding)
and short ones, where a per-sample launch would cost more than it saves, stay on FA2 varlen.

`packed_attention(q, k, v, cu_host, scale, min_cudnn_tokens)` is a torch custom op (opaque to
torch.compile: a per-block compiled graph calls it like one kernel) with its own backward op;
`cu_host` is the int32 boundary tensor on the CPU (the segment plan is host-side Python).
GQA: cuDNN gets the k/v heads as they are; if the installed cuDNN refuses fewer k/v than
query heads, they are repeated (and their gradients summed back) from then on. If cuDNN refuses
a segment outright (an unsupported shape on some GPU/cuDNN), the op warns once and runs every
segment through FA2 varlen from then on: a refusal costs speed, not the run.
"""

from __future__ import annotations

import logging
from itertools import pairwise

import torch
from torch import nn

log = logging.getLogger(__name__)

MIN_CUDNN_TOKENS = 1024
"""Samples at least this long go to cuDNN one by one; shorter ones are batched into FA2 varlen."""
_CUDNN_NATIVE_GQA = [True]
"""Whether cuDNN takes fewer k/v heads than query heads (cleared after its first refusal)."""


def plan_segments(cu: list[int], min_cudnn_tokens: int) -> list[tuple[str, int, int, list[int]]]:
    """[(kernel, start, end, local cu_seqlens)] covering the packed samples in order: `cudnn`
    for one sample of >= `min_cudnn_tokens` tokens (at least 2: cuDNN refuses a 1-token
    sequence), `flash` for a run of shorter ones. Empty samples are skipped."""
    min_cudnn_tokens = max(2, min_cudnn_tokens)
    segments: list[tuple[str, int, int, list[int]]] = []
    run: list[int] = []

    def close_run() -> None:
        if run:
            segments.append(("flash", run[0], run[-1], [x - run[0] for x in run]))
            run.clear()

    for s, e in pairwise(cu):
        if e <= s:
            continue
        if e - s >= min_cudnn_tokens:
            close_run()
            segments.append(("cudnn", s, e, [0, e - s]))
        else:
            if not run or run[-1] != s:
                close_run()
                run.append(s)
            run.append(e)
    close_run()
    return segments


def _bhld(x: torch.Tensor) -> torch.Tensor:
    """[L, H, d] -> [1, H, L, d] view."""
    return x.transpose(0, 1).unsqueeze(0)


def _repeat_kv(x: torch.Tensor, n_rep: int) -> torch.Tensor:
    """[1, Hkv, L, d] -> [1, Hkv * n_rep, L, d] (query head h uses kv head h // n_rep)."""
    return x if n_rep == 1 else x.repeat_interleave(n_rep, dim=1)


def _sum_head_groups(grad: torch.Tensor, kv_heads: int) -> torch.Tensor:
    """[heads, L, d] gradient of repeated k/v heads -> [kv_heads, L, d] (sum over each group)."""
    return grad if grad.shape[0] == kv_heads else grad.unflatten(0, (kv_heads, -1)).sum(1)


def _flash_args(cu_local: list[int], device: torch.device) -> tuple[torch.Tensor, int]:
    cu = torch.tensor(cu_local, dtype=torch.int32).to(device, non_blocking=True)
    return cu, max(b - a for a, b in pairwise(cu_local))


def _cudnn_sdpa(qb: torch.Tensor, kb: torch.Tensor, vb: torch.Tensor, scale: float):
    """aten cuDNN attention on [1, heads, L, d]; k/v repeated to the query heads only where
    cuDNN refuses native GQA."""
    aten = torch.ops.aten
    if _CUDNN_NATIVE_GQA[0] or kb.shape[1] == qb.shape[1]:
        try:
            return aten._scaled_dot_product_cudnn_attention(
                qb, kb, vb, None, True, 0.0, True, False, scale=scale
            )
        except RuntimeError:
            if kb.shape[1] == qb.shape[1]:
                raise
            _CUDNN_NATIVE_GQA[0] = False
    n_rep = qb.shape[1] // kb.shape[1]
    return aten._scaled_dot_product_cudnn_attention(
        qb, _repeat_kv(kb, n_rep), _repeat_kv(vb, n_rep), None, True, 0.0, True, False, scale=scale
    )


def cudnn_forward(q, k, v, cu_local: list[int], scale: float):
    """One sample [L, heads, d] -> (out [L, Hq, d], logsumexp [Hq, L] fp32)."""
    res = _cudnn_sdpa(_bhld(q), _bhld(k), _bhld(v), scale)
    return res[0][0].transpose(0, 1), res[1].reshape(q.shape[1], q.shape[0])


def cudnn_backward(grad_out, q, k, v, out, lse, cu_local: list[int], scale: float):
    """(dq, dk, dv) [L, heads, d] of `cudnn_forward`."""
    H, Hkv, n = q.shape[1], k.shape[1], q.shape[0]
    n_rep = 1 if _CUDNN_NATIVE_GQA[0] else H // Hkv
    no_rng = torch.zeros((), dtype=torch.int64, device=q.device)  # dropout 0: unused
    gq, gk, gv = torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
        _bhld(grad_out), _bhld(q), _repeat_kv(_bhld(k), n_rep), _repeat_kv(_bhld(v), n_rep),
        _bhld(out), lse.reshape(1, H, n, 1).contiguous(),
        no_rng, no_rng, None, None, None, n, n, 0.0, True, scale=scale,
    )  # fmt: skip
    dk = _sum_head_groups(gk[0], Hkv).transpose(0, 1)
    return gq[0].transpose(0, 1), dk, _sum_head_groups(gv[0], Hkv).transpose(0, 1)


def flash_forward(q, k, v, cu_local: list[int], scale: float):
    """Packed samples [T, heads, d] (boundaries `cu_local`) -> (out, logsumexp [Hq, T])."""
    cu, longest = _flash_args(cu_local, q.device)
    o, lse, *_ = torch.ops.aten._flash_attention_forward(
        q, k, v, cu, cu, longest, longest, 0.0, True, False, scale=scale
    )
    return o, lse[:, : q.shape[0]]


def flash_backward(grad_out, q, k, v, out, lse, cu_local: list[int], scale: float):
    """(dq, dk, dv) of `flash_forward`."""
    cu, longest = _flash_args(cu_local, q.device)
    rng = torch.zeros((2,), dtype=torch.uint64, device=q.device)  # dropout 0: unused
    return torch.ops.aten._flash_attention_backward(
        grad_out, q, k, v, out, lse.contiguous(), cu, cu, longest, longest, 0.0, True, rng,
        torch.empty(0, device=q.device), scale=scale,
    )  # fmt: skip


KERNELS = {"cudnn": (cudnn_forward, cudnn_backward), "flash": (flash_forward, flash_backward)}
"""kernel name -> (forward, backward) on one segment of `plan_segments` (tests swap in CPU
references to check the assembly around them)."""
_CUDNN_USABLE = [True]
"""Cleared, with a warning, the first time cuDNN refuses a segment: FA2 varlen takes all."""
NO_CUDNN = 2**62
"""A `min_cudnn_tokens` no sample reaches."""


def _forward_segments(q, k, v, cu: list[int], scale: float, min_cudnn_tokens: int):
    T, H, _ = q.shape
    out = torch.zeros_like(q)
    lse = torch.zeros((H, T), dtype=torch.float32, device=q.device)
    for kernel, s, e, local in plan_segments(cu, min_cudnn_tokens):
        o, l = KERNELS[kernel][0](q[s:e], k[s:e], v[s:e], local, scale)
        out[s:e].copy_(o)
        lse[:, s:e].copy_(l)
    return out, lse


def _effective_min(min_cudnn_tokens: int) -> int:
    return min_cudnn_tokens if _CUDNN_USABLE[0] else NO_CUDNN


@torch.library.custom_op("swefleet::packed_attention", mutates_args=())
def packed_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_host: torch.Tensor,
    scale: float,
    min_cudnn_tokens: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal attention of packed samples: q [T, Hq, d], k/v [T, Hkv, d] -> (out [T, Hq, d],
    logsumexp [Hq, T] fp32)."""
    cu = cu_host.tolist()
    if _CUDNN_USABLE[0]:
        try:
            return _forward_segments(q, k, v, cu, scale, min_cudnn_tokens)
        except RuntimeError as exc:
            if "cudnn" not in str(exc).lower() or isinstance(exc, torch.OutOfMemoryError):
                raise
            _CUDNN_USABLE[0] = False
            log.warning("cuDNN attention refused (%s): FA2 varlen from now on", str(exc)[:300])
    return _forward_segments(q, k, v, cu, scale, NO_CUDNN)


@packed_attention.register_fake
def _(q, k, v, cu_host, scale, min_cudnn_tokens):
    return torch.empty_like(q), q.new_empty((q.shape[1], q.shape[0]), dtype=torch.float32)


@torch.library.custom_op("swefleet::packed_attention_backward", mutates_args=())
def packed_attention_backward(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    cu_host: torch.Tensor,
    scale: float,
    min_cudnn_tokens: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of `packed_attention` (the same segment plan as its forward)."""
    dq, dk, dv = torch.zeros_like(q), torch.zeros_like(k), torch.zeros_like(v)
    grad_out = grad_out.contiguous()
    for kernel, s, e, local in plan_segments(cu_host.tolist(), _effective_min(min_cudnn_tokens)):
        gq, gk, gv = KERNELS[kernel][1](
            grad_out[s:e], q[s:e], k[s:e], v[s:e], out[s:e], lse[:, s:e], local, scale
        )
        dq[s:e].copy_(gq)
        dk[s:e].copy_(gk)
        dv[s:e].copy_(gv)
    return dq, dk, dv


@packed_attention_backward.register_fake
def _(grad_out, q, k, v, out, lse, cu_host, scale, min_cudnn_tokens):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, cu_host, scale, min_cudnn_tokens = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, cu_host)
    ctx.scale, ctx.min_cudnn_tokens = scale, min_cudnn_tokens


def _backward(ctx, grad_out, _grad_lse):
    q, k, v, out, lse, cu_host = ctx.saved_tensors
    dq, dk, dv = packed_attention_backward(
        grad_out, q, k, v, out, lse, cu_host, ctx.scale, ctx.min_cudnn_tokens
    )
    return dq, dk, dv, None, None, None


packed_attention.register_autograd(_backward, setup_context=_setup_context)


class HostBoundaries:
    """The packed samples' boundaries as a CPU int tensor (`.cpu_tensor`), in a holder that
    input-moving hooks leave alone: FSDP2's root forward moves every tensor of the model's
    inputs to the GPU, namedtuple fields included, and the per-sample plan needs the host
    copy (reading a GPU one would sync the stream in every layer)."""

    def __init__(self, cpu_tensor: torch.Tensor) -> None:
        if cpu_tensor.device.type != "cpu":
            raise ValueError("HostBoundaries holds a CPU tensor")
        self.cpu_tensor = cpu_tensor


class PackedCudnnAttention(nn.Module):
    """Drop-in for torchtitan's `VarlenAttentionWrapper` (same call: q/k/v [bs, heads, L, d]
    and a `VarlenMetadata`; returns [bs * L, heads, d]). The metadata's `cu_seq_k` must be a
    `HostBoundaries` (`trainer.titan.packed_attention_masks` builds it so for `cudnn`)."""

    def __init__(self, min_cudnn_tokens: int = MIN_CUDNN_TOKENS) -> None:
        super().__init__()
        self.min_cudnn_tokens = min_cudnn_tokens

    def forward(self, xq, xk, xv, attention_masks, scale: float | None = None) -> torch.Tensor:
        bounds = attention_masks.cu_seq_k
        if not isinstance(bounds, HostBoundaries):
            raise TypeError("cudnn packed attention needs the sample boundaries on the CPU "
                             "(a HostBoundaries as the metadata's cu_seq_k)")  # fmt: skip
        cu_host = bounds.cpu_tensor
        q, k, v = (x.transpose(1, 2).flatten(0, 1) for x in (xq, xk, xv))
        scale = scale if scale is not None else q.shape[-1] ** -0.5
        out, _ = packed_attention(q, k, v, cu_host, float(scale), self.min_cudnn_tokens)
        return out
