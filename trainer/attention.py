"""FlexAttention masks for samples packed into one row (pure torch; no torchtitan import).
Sample boundaries always come from `cu_seqlens` (the batch's per-sample lengths), never from EOS
tokens: causal within a sample, nothing across samples.

(cuDNN's ragged SDPA was tried as a third packed kernel: torch 2.11 ships it switched off in
`varlen_attn`, whose cuDNN backward call passes its arguments in the wrong order; called
directly, its forward gave FlashAttention-2's loss but its backward non-finite gradients, at 10x
the step time, on the H200. See docs/benchmarks.md.)
"""

from __future__ import annotations

import torch


def document_ids(cu_seqlens: torch.Tensor, n_tokens: int) -> torch.Tensor:
    """Sample index of every packed token ([n_tokens], int32) from the sample boundaries."""
    pos = torch.arange(n_tokens, device=cu_seqlens.device, dtype=cu_seqlens.dtype)
    return (torch.searchsorted(cu_seqlens[1:], pos, right=True)).to(torch.int32)


def document_causal_mask_mod(doc: torch.Tensor):
    """FlexAttention mask_mod: query q sees key k iff k <= q and both are in one sample."""

    def mask_mod(b, h, q_idx, kv_idx):
        return (q_idx >= kv_idx) & (doc[q_idx] == doc[kv_idx])

    return mask_mod


def document_block_mask(cu_seqlens: torch.Tensor, n_tokens: int):
    """FlexAttention BlockMask (batch 1, heads broadcast) for samples packed into one row of
    `n_tokens`; on CUDA the mask is built by a compiled kernel (never a dense [T, T] mask)."""
    from torch.nn.attention.flex_attention import create_block_mask

    doc = document_ids(cu_seqlens, n_tokens)
    return create_block_mask(
        document_causal_mask_mod(doc),
        1,
        None,
        n_tokens,
        n_tokens,
        device=cu_seqlens.device,
        _compile=cu_seqlens.is_cuda,
    )
