"""One RL optimizer step on one packed batch: micro-batched forward/backward, clip, AdamW."""

from __future__ import annotations

import numpy as np
import torch

from trainer import titan
from trainer.config import TrainerConfig
from trainer.forward import (
    build_micro_batch,
    check_batch_fits,
    micro_batch_logprobs,
    split_samples,
)
from trainer.losses import policy_loss

_SUMMED = ("loss", "ratio_mean", "clip_fraction", "tis_fraction", "mismatch_kl", "entropy")


def build_optimizer(policy: titan.Policy, cfg: TrainerConfig) -> torch.optim.Optimizer:
    """AdamW over all parameters (fused on CUDA)."""
    params = [p for p in policy.model.parameters() if p.requires_grad]
    fused = next(iter(params)).device.type == "cuda"
    return torch.optim.AdamW(
        params, lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay, fused=fused
    )


def autocast_dtype(cfg: TrainerConfig) -> torch.dtype | None:
    return torch.bfloat16 if cfg.compute_dtype == "bfloat16" else None


def train_step(
    policy: titan.Policy,
    optimizer: torch.optim.Optimizer,
    arrays: dict[str, np.ndarray],
    cfg: TrainerConfig,
) -> dict[str, float]:
    """Forward/backward every micro-batch of `arrays` (loss normalised by the batch's trained
    token count), clip the gradient norm, step. Returns token-mean metrics of the batch."""
    check_batch_fits(policy, arrays)
    device = next(policy.model.parameters()).device
    n_trained = int(arrays["loss_mask"].sum())
    if n_trained == 0:
        raise ValueError("batch has no trained tokens (loss_mask is all False)")
    policy.model.train()
    optimizer.zero_grad(set_to_none=True)
    totals = dict.fromkeys(_SUMMED, 0.0)
    n_positions = 0
    padded = policy.attention == "sdpa"
    for s0, s1 in split_samples(arrays["cu_seqlens"], cfg.micro_batch_tokens, padded):
        mb = build_micro_batch(arrays, s0, s1, policy.attention, device)
        n_positions += mb.n_positions
        logp, entropy = micro_batch_logprobs(
            policy, mb, cfg.logprob_chunk_size, autocast_dtype(cfg)
        )
        mask = torch.ones_like(mb.targets, dtype=torch.bool)
        loss, metrics = policy_loss(
            cfg.loss,
            logp,
            mb.logp_inf,
            mb.advantages,
            mask,
            eps_low=cfg.eps_low,
            eps_high=cfg.eps_high,
            tis_cap=cfg.tis_cap,
            n_tokens=n_trained,
        )
        loss.backward()
        metrics["entropy"] = float(entropy.sum()) / n_trained
        for key in _SUMMED:
            totals[key] += metrics[key]
    grad_norm = torch.nn.utils.clip_grad_norm_(policy.model.parameters(), cfg.max_grad_norm)
    finite = bool(torch.isfinite(grad_norm))
    if finite:  # a non-finite gradient would poison the weights: skip the update, report it
        optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return {
        **totals,
        "grad_norm": float(grad_norm),
        "skipped_update": not finite,
        "n_samples": int(len(arrays["cu_seqlens"]) - 1),
        "n_tokens": len(arrays["tokens"]),
        "n_trained_tokens": n_trained,
        "masked_fraction": n_trained / len(arrays["tokens"]),
        "padding_fraction": 1.0 - len(arrays["tokens"]) / max(n_positions, 1),
    }
