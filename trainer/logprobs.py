"""Token log-probs and entropies with a chunked lm_head and an fp32 log-softmax.

Only the rows that are trained on go through the lm_head, `chunk_size` rows at a time, inside
one autograd Function that applies the softmax gradient directly (no autograd graph over the
[rows, vocab] logits; fp32 logits never exist for more than one chunk). With fp32 matmuls
forward keeps only the per-row logsumexp and backward recomputes each chunk's logits; with bf16
matmuls forward keeps the bf16 softmax (2 bytes per row x vocab) and backward skips the recompute.

Matmul precision (`matmul_dtype`): `float32` multiplies in fp32 (or the inputs' wider dtype;
CPU tests, exact parity with transformers); `bfloat16` rounds the hidden rows and the weight to
bf16 and multiplies with fp32 accumulation and an fp32 result (on CUDA `torch.mm(out_dtype=)`),
like autocast's lm_head but without rounding the logits to bf16. The log-softmax, the gathered
log-prob, the entropy and the weight gradient accumulation are always fp32.
"""

from __future__ import annotations

import torch


def _mm(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """a @ b with inputs in `dtype` (fp32 or wider: the inputs' dtype) and an fp32+ result."""
    if dtype == torch.float32:
        wide = torch.promote_types(torch.promote_types(a.dtype, b.dtype), torch.float32)
        return a.to(wide) @ b.to(wide)
    a, b = a.to(dtype), b.to(dtype)
    if a.is_cuda:
        return torch.mm(a, b, out_dtype=torch.float32)
    return (a @ b).float()


def _softmax_stats(
    logits: torch.Tensor, targets: torch.Tensor, prob_dtype: torch.dtype | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """(logsumexp, logp of targets, entropy, softmax in `prob_dtype` or None) of fp32 logits."""
    lse = torch.logsumexp(logits, dim=-1)
    shifted = logits - lse.unsqueeze(-1)
    logp = shifted.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    probs = shifted.exp()
    entropy = -(probs * shifted).sum(-1)
    return lse, logp, entropy, None if prob_dtype is None else probs.to(prob_dtype)


_compiled_stats = None


def _stats_fn(fused: bool):
    """`_softmax_stats`, compiled by inductor into two fused passes when `fused` (CUDA)."""
    global _compiled_stats
    if not fused:
        return _softmax_stats
    if _compiled_stats is None:
        _compiled_stats = torch.compile(_softmax_stats, dynamic=True, fullgraph=True)
    return _compiled_stats


class _ChunkedLogprobs(torch.autograd.Function):
    """fp32 matmuls: backward recomputes each chunk's logits (nothing [rows, vocab] is kept).
    Low-precision matmuls with gradients on: forward keeps the softmax in that dtype ([rows, vocab], half the
    size of fp32 logits) and backward needs no recompute: the gradient goes through the same
    dtype into its matmuls anyway."""

    @staticmethod
    def forward(ctx, hidden, weight, targets, chunk_size, matmul_dtype, fused, keep_probs):
        n = hidden.shape[0]
        wide = torch.promote_types(hidden.dtype, torch.float32)
        low = matmul_dtype != torch.float32
        keep = low and keep_probs
        h = hidden.to(matmul_dtype) if low else hidden
        w = weight.to(matmul_dtype) if low else weight
        logp = torch.empty(n, dtype=wide, device=hidden.device)
        lse = torch.empty(n, dtype=wide, device=hidden.device)
        entropy = torch.empty(n, dtype=wide, device=hidden.device)
        probs = torch.empty((n, w.shape[0]), dtype=matmul_dtype, device=h.device) if keep else None
        stats = _stats_fn(fused)
        for s in range(0, n, chunk_size):
            e = min(s + chunk_size, n)
            logits = _mm(h[s:e], w.t(), matmul_dtype)
            lse[s:e], logp[s:e], entropy[s:e], p = stats(
                logits, targets[s:e], matmul_dtype if keep else None
            )
            if keep:
                probs[s:e] = p
        ctx.save_for_backward(h, w, targets, lse, probs)
        ctx.chunk_size, ctx.matmul_dtype = chunk_size, matmul_dtype
        ctx.hidden_dtype, ctx.weight_dtype = hidden.dtype, weight.dtype
        ctx.mark_non_differentiable(entropy)
        return logp, entropy

    @staticmethod
    def backward(ctx, grad_logp, _grad_entropy):
        h, w, targets, lse, probs = ctx.saved_tensors
        dtype = ctx.matmul_dtype
        wide_w = torch.promote_types(ctx.weight_dtype, torch.float32)
        grad_h = torch.empty(h.shape, dtype=lse.dtype, device=h.device)
        grad_w = torch.zeros(w.shape, dtype=wide_w, device=w.device)
        for s in range(0, h.shape[0], ctx.chunk_size):
            e = min(s + ctx.chunk_size, h.shape[0])
            g = grad_logp[s:e].to(lse.dtype)
            # d logp_t / d logits = onehot(t) - softmax(logits)
            if probs is None:
                grad_logits = _mm(h[s:e], w.t(), dtype)
                grad_logits.sub_(lse[s:e].unsqueeze(-1)).exp_().mul_(-g.unsqueeze(-1))
            else:
                grad_logits = probs[s:e] * (-g).to(dtype).unsqueeze(-1)
            rows = torch.arange(e - s, device=h.device)
            grad_logits[rows, targets[s:e]] += g.to(grad_logits.dtype)
            grad_h[s:e] = _mm(grad_logits, w, dtype)
            grad_w += _mm(grad_logits.t(), h[s:e], dtype)
        return (
            grad_h.to(ctx.hidden_dtype),
            grad_w.to(ctx.weight_dtype),
            None,
            None,
            None,
            None,
            None,
        )


def token_logprobs(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    chunk_size: int,
    matmul_dtype: torch.dtype = torch.float32,
    fused: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(targets[i] | hidden[i]) and the entropy of that distribution, for rows [N, dim]
    of `hidden` and the lm_head `weight` [vocab, dim]. Returns (logp [N], entropy [N]), fp32
    (or wider for wider inputs); the entropy carries no gradient. `fused`: the per-chunk
    log-softmax statistics run as one torch.compile'd kernel pair (CUDA)."""
    if hidden.shape[0] != targets.shape[0]:
        raise ValueError(f"{hidden.shape[0]} hidden rows but {targets.shape[0]} targets")
    if matmul_dtype not in (torch.float32, torch.bfloat16, torch.float16):
        raise ValueError(f"matmul_dtype {matmul_dtype}")
    with torch.autocast(device_type=hidden.device.type, enabled=False):
        keep_probs = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
        return _ChunkedLogprobs.apply(
            hidden, weight, targets, int(chunk_size), matmul_dtype, fused, keep_probs
        )
