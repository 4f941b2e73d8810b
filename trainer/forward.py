"""From a packed batch (swefleet.batch schema) to trainer log-probs of the trained tokens.

A step's samples are cut into micro-batches of whole samples. Attention never crosses a sample:
- `sdpa`: each sample is its own causal row, right-padded to the longest in the micro-batch
  (padding comes after every real token, so causal attention never sees it);
- `varlen`: samples are packed into one row; the kernel gets the boundaries from `cu_seqlens`
  and RoPE gets the per-sample `positions`.
Only rows that predict a trained token (loss_mask[t] -> hidden row of token t-1, same sample)
go through the chunked lm_head.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from trainer import titan
from trainer.logprobs import token_logprobs


@dataclass
class MicroBatch:
    """Device tensors for one forward/backward."""

    tokens: torch.Tensor
    """[B, L] (sdpa: one padded row per sample) or [1, T] (varlen: packed)."""
    positions: torch.Tensor | None
    attention_masks: Any
    pred_rows: torch.Tensor
    """Row index into the flattened [B*L] hidden states that predicts each trained token."""
    targets: torch.Tensor
    """The trained tokens (ids), in packed order."""
    logp_inf: torch.Tensor
    advantages: torch.Tensor
    n_positions: int
    """Positions computed by the forward (including padding)."""


def check_batch_fits(policy: titan.Policy, arrays: dict[str, np.ndarray]) -> None:
    """Fail early (not with a device-side assert) on token ids outside the vocabulary or samples
    longer than the model's RoPE table."""
    vocab = int(policy.hf_config["vocab_size"])
    max_len = int(policy.model.rope_cache.shape[0])
    tokens = arrays["tokens"]
    if tokens.min() < 0 or tokens.max() >= vocab:
        raise ValueError(f"token ids must be in [0, {vocab}): got [{tokens.min()}, {tokens.max()}]")
    longest = int(np.diff(arrays["cu_seqlens"]).max())
    if longest > max_len:
        raise ValueError(f"a sample has {longest} tokens; the model supports {max_len}")


def split_samples(cu_seqlens: np.ndarray, budget: int, padded: bool) -> Iterator[tuple[int, int]]:
    """Consecutive sample ranges [s0, s1) whose cost stays within `budget` tokens (cost = rows x
    longest row when `padded`, else the token count). A sample longer than the budget is alone."""
    lengths = np.diff(cu_seqlens)
    s0, longest = 0, 0
    for i, n in enumerate(lengths):
        new_longest = max(longest, int(n))
        cost = new_longest * (i - s0 + 1) if padded else int(cu_seqlens[i + 1] - cu_seqlens[s0])
        if i > s0 and cost > budget:
            yield s0, i
            s0, new_longest = i, int(n)
        longest = new_longest
    yield s0, len(lengths)


def build_micro_batch(
    arrays: dict[str, np.ndarray], s0: int, s1: int, attention: str, device: torch.device
) -> MicroBatch:
    """Tensors for samples [s0, s1) of a packed batch, laid out for `attention`."""
    cu = arrays["cu_seqlens"]
    t0, t1 = int(cu[s0]), int(cu[s1])
    local_cu = (cu[s0 : s1 + 1] - t0).astype(np.int64)
    lengths = np.diff(local_cu)
    tokens = arrays["tokens"][t0:t1].astype(np.int64)
    if attention == "sdpa":
        width = int(lengths.max())
        sample_of = np.repeat(np.arange(len(lengths)), lengths)
        rows = sample_of * width + arrays["positions"][t0:t1]
        grid = np.zeros(len(lengths) * width, dtype=np.int64)
        grid[rows] = tokens
        tok = torch.from_numpy(grid.reshape(len(lengths), width))
        positions, masks = None, None
    elif attention == "varlen":
        rows = np.arange(t1 - t0)
        tok = torch.from_numpy(tokens).unsqueeze(0)
        positions = torch.from_numpy(arrays["positions"][t0:t1].astype(np.int64)).unsqueeze(0)
        positions = positions.to(device)
        cu_t = torch.from_numpy(local_cu.astype(np.int32)).to(device)
        masks = titan.varlen_metadata(cu_t, int(lengths.max()))
    else:
        raise ValueError(f"unknown attention {attention!r}")
    trained = np.flatnonzero(arrays["loss_mask"][t0:t1])

    def dev(a: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a)).to(device=device, dtype=dtype)

    return MicroBatch(
        tokens=tok.to(device),
        positions=positions,
        attention_masks=masks,
        pred_rows=dev(rows[trained] - 1, torch.int64),
        targets=dev(tokens[trained], torch.int64),
        logp_inf=dev(arrays["inference_logprobs"][t0:t1][trained], torch.float32),
        advantages=dev(arrays["advantages"][t0:t1][trained], torch.float32),
        n_positions=int(tok.numel()),
    )


def micro_batch_logprobs(
    policy: titan.Policy, mb: MicroBatch, chunk_size: int, autocast_dtype: torch.dtype | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Trainer (logp, entropy) of the micro-batch's trained tokens, in packed order."""
    device_type = mb.tokens.device.type
    with torch.autocast(device_type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
        hidden = titan.hidden_states(policy.model, mb.tokens, mb.positions, mb.attention_masks)
    hidden = hidden.reshape(-1, hidden.shape[-1]).index_select(0, mb.pred_rows)
    return token_logprobs(hidden, titan.output_weight(policy.model), mb.targets, chunk_size)


@torch.no_grad()
def batch_logprobs(
    policy: titan.Policy,
    arrays: dict[str, np.ndarray],
    *,
    chunk_size: int = 1024,
    micro_batch_tokens: int = 8192,
    autocast_dtype: torch.dtype | None = None,
) -> np.ndarray:
    """Trainer logprob of every trained token of a packed batch: float32 [T], 0 where
    loss_mask is False. (For parity tests and for recomputing old-policy logprobs.)"""
    check_batch_fits(policy, arrays)
    device = next(policy.model.parameters()).device
    out = np.zeros(len(arrays["tokens"]), dtype=np.float32)
    cu = arrays["cu_seqlens"]
    padded = policy.attention == "sdpa"
    for s0, s1 in split_samples(cu, micro_batch_tokens, padded):
        mb = build_micro_batch(arrays, s0, s1, policy.attention, device)
        logp, _ = micro_batch_logprobs(policy, mb, chunk_size, autocast_dtype)
        t0, t1 = int(cu[s0]), int(cu[s1])
        out[t0 + np.flatnonzero(arrays["loss_mask"][t0:t1])] = logp.float().cpu().numpy()
    return out
