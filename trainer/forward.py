"""From a packed batch (swefleet.batch schema) to trainer log-probs of the trained tokens.

A step's samples are cut into micro-batches of whole samples. Attention never crosses a sample:
- `sdpa`: each sample is its own causal row, right-padded to the longest in the micro-batch
  (padding comes after every real token, so causal attention never sees it);
- packed (`varlen`, `flex`): samples are packed into one row; the kernel gets the
  boundaries from `cu_seqlens` (varlen metadata, or a FlexAttention document-causal block mask)
  and RoPE gets the per-sample `positions`.
Only rows that predict a trained token (loss_mask[t] -> hidden row of token t-1, same sample)
go through the chunked lm_head. An optional batch array `routed_experts [T, moe_layers, top_k]`
(the inference server's MoE routing) is laid out like the tokens and replayed by the routers.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from swefleet.trainer import titan


@dataclass
class MicroBatch:
    """Device tensors for one forward/backward."""

    tokens: torch.Tensor
    """[B, L] (sdpa: one padded row per sample) or [1, T] (packed kernels)."""
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
    routed_experts: torch.Tensor | None = None
    """MoE router replay: expert ids [n_positions, moe_layers, top_k] in the forward's
    flattened token order (padding positions: expert 0); None routes with the model's top-k."""


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
    if "routed_experts" in arrays:
        from swefleet.trainer import router_replay

        layers = router_replay.moe_layers(policy.model)
        ids = arrays["routed_experts"]
        if not layers:
            raise ValueError("batch has routed_experts but the model has no MoE layers")
        want = (len(tokens), len(layers), layers[0].router.top_k)
        if ids.shape != want:
            raise ValueError(f"routed_experts shape {ids.shape}, want {want} (tokens, layers, k)")
        n_experts = layers[0].router.num_experts
        if ids.min() < 0 or ids.max() >= n_experts:
            raise ValueError(f"routed expert ids must be in [0, {n_experts})")


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
    elif attention in titan.PACKED_ATTENTIONS:
        rows = np.arange(t1 - t0)
        tok = torch.from_numpy(tokens).unsqueeze(0)
        positions = torch.from_numpy(arrays["positions"][t0:t1].astype(np.int64)).unsqueeze(0)
        positions = positions.to(device)
        cu_t = torch.from_numpy(local_cu.astype(np.int32)).to(device)
        masks = titan.packed_attention_masks(attention, cu_t, int(lengths.max()), t1 - t0)
    else:
        raise ValueError(f"unknown attention {attention!r}")
    trained = np.flatnonzero(arrays["loss_mask"][t0:t1])
    routed = None
    if "routed_experts" in arrays:  # [T, moe_layers, top_k], aligned with tokens
        ids = arrays["routed_experts"][t0:t1].astype(np.int64)
        routed = np.zeros((tok.numel(), *ids.shape[1:]), dtype=np.int64)
        routed[rows] = ids
        routed = torch.from_numpy(routed).to(device)

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
        routed_experts=routed,
    )


@contextmanager
def replaying(policy: titan.Policy, mb: MicroBatch) -> Iterator[None]:
    """MoE router replay of the micro-batch's `routed_experts` while inside (keep the forward
    AND the backward inside: activation checkpointing re-runs the routers in backward)."""
    if mb.routed_experts is None:
        yield
        return
    from swefleet.trainer import router_replay

    router_replay.set_replay(policy.model, mb.routed_experts)
    try:
        yield
    finally:
        router_replay.set_replay(policy.model, None)


def micro_batch_logprobs(
    policy: titan.Policy,
    mb: MicroBatch,
    chunk_size: int,
    autocast_dtype: torch.dtype | None,
    lm_head_dtype: torch.dtype = torch.float32,
    fused_head: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Trainer (logp, entropy) of the micro-batch's trained tokens, in packed order."""
    device_type = mb.tokens.device.type
    with torch.autocast(device_type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
        return titan.policy_logprobs(
            policy,
            mb.tokens,
            mb.positions,
            mb.attention_masks,
            mb.pred_rows,
            mb.targets,
            chunk_size=chunk_size,
            matmul_dtype=lm_head_dtype,
            fused=fused_head,
        )


@torch.no_grad()
def batch_logprobs(
    policy: titan.Policy,
    arrays: dict[str, np.ndarray],
    *,
    chunk_size: int = 1024,
    micro_batch_tokens: int = 8192,
    autocast_dtype: torch.dtype | None = None,
    lm_head_dtype: torch.dtype = torch.float32,
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
        with replaying(policy, mb):
            logp, _ = micro_batch_logprobs(policy, mb, chunk_size, autocast_dtype, lm_head_dtype)
        t0, t1 = int(cu[s0]), int(cu[s1])
        out[t0 + np.flatnonzero(arrays["loss_mask"][t0:t1])] = logp.float().cpu().numpy()
    return out
