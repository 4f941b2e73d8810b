"""One RL optimizer step on one packed batch: micro-batched forward/backward, clip, AdamW.

Under FSDP (an initialised process group, `policy.dp_size` ranks) every rank reads the same
batch and trains a contiguous, token-balanced range of its samples. The loss is a token sum
divided by the batch's global trained-token count and FSDP sums (not averages) gradients, so
the update equals the single-process one. Ranks run the same number of micro-batches (FSDP's
collectives must pair up): a rank with fewer runs zero-weight copies of one of its own.
"""

from __future__ import annotations

import numpy as np
import torch
from swefleet.trainer import titan
from swefleet.trainer.config import TrainerConfig
from swefleet.trainer.expert_load import ExpertLoad, token_rows
from swefleet.trainer.forward import (
    build_micro_batch,
    check_batch_fits,
    micro_batch_logprobs,
    replaying,
    split_samples,
)
from swefleet.trainer.losses import policy_loss

_SUMMED = ("loss", "ratio_mean", "clip_fraction", "tis_fraction", "mismatch_kl", "entropy")


def build_optimizer(policy: titan.Policy, cfg: TrainerConfig) -> torch.optim.Optimizer:
    """AdamW over all parameters (fused on CUDA)."""
    params = [p for p in policy.model.parameters() if p.requires_grad]
    fused = next(iter(params)).device.type == "cuda"
    return torch.optim.AdamW(
        params, lr=cfg.lr, betas=cfg.betas, eps=cfg.eps, weight_decay=cfg.weight_decay,
        fused=fused,
    )


def autocast_dtype(cfg: TrainerConfig) -> torch.dtype | None:
    return torch.bfloat16 if cfg.compute_dtype == "bfloat16" else None


def lm_head_dtype(cfg: TrainerConfig) -> torch.dtype:
    name = cfg.compute_dtype if cfg.lm_head_dtype == "auto" else cfg.lm_head_dtype
    return torch.bfloat16 if name == "bfloat16" else torch.float32


def dist_rank_world() -> tuple[int, int]:
    """(rank, world size) of the default process group, (0, 1) without one."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def rank_sample_range(cu_seqlens: np.ndarray, rank: int, world: int) -> tuple[int, int]:
    """Samples [s0, s1) of `rank`: contiguous ranges cut at the sample boundaries nearest to
    equal token shares (a range may be empty when there are fewer samples than ranks)."""
    cu = np.asarray(cu_seqlens, dtype=np.int64)
    n = len(cu) - 1
    cuts = [0]
    for r in range(1, world):
        target = cu[-1] * r / world
        cuts.append(max(cuts[-1], int(np.abs(cu - target).argmin())))
    cuts.append(n)
    return cuts[rank], cuts[rank + 1]


def _micro_ranges(
    cu: np.ndarray, s0: int, s1: int, budget: int, padded: bool
) -> list[tuple[int, int]]:
    if s1 <= s0:
        return []
    local = cu[s0 : s1 + 1] - cu[s0]
    return [(a + s0, b + s0) for a, b in split_samples(local, budget, padded)]


def _all_reduce(values: list[float], device: torch.device, op: str) -> list[float]:
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM)
    return t.tolist()


def _clip_grad_norm(params: list[torch.Tensor], max_norm: float) -> torch.Tensor:
    """Global gradient L2 norm (full norm under FSDP), then clip in place. Gradients are
    grouped by device mesh (with expert parallelism the experts' live on another mesh than the
    rest, and DTensor ops cannot mix meshes): each group's norm is reduced over its mesh, then
    the groups' norms are combined."""
    from torch.distributed.tensor import DTensor

    groups: dict[object, list[torch.Tensor]] = {}
    for p in params:
        if p.grad is not None:
            groups.setdefault(getattr(p.grad, "device_mesh", None), []).append(p)
    norms = []
    for group in groups.values():  # same order on every rank (parameter order)
        norm = torch.nn.utils.get_total_norm([p.grad for p in group], 2.0)
        norms.append(norm.full_tensor() if isinstance(norm, DTensor) else norm)
    total = torch.linalg.vector_norm(torch.stack(norms), 2.0) if norms else torch.zeros(())
    for group in groups.values():
        torch.nn.utils.clip_grads_with_norm_(group, max_norm, total)
    return total


def train_step(
    policy: titan.Policy,
    optimizer: torch.optim.Optimizer,
    arrays: dict[str, np.ndarray],
    cfg: TrainerConfig,
) -> dict[str, float]:
    """Forward/backward every micro-batch of `arrays` (this rank's share under FSDP; loss
    normalised by the batch's trained token count), clip the gradient norm, step. Returns
    token-mean metrics of the whole batch (identical on every rank)."""
    check_batch_fits(policy, arrays)
    device = next(policy.model.parameters()).device
    n_trained = int(arrays["loss_mask"].sum())
    if n_trained == 0:
        raise ValueError("batch has no trained tokens (loss_mask is all False)")
    rank, world = dist_rank_world()
    if world != policy.dp_size:
        raise RuntimeError(f"policy is sharded over {policy.dp_size} ranks, world is {world}")
    cu = arrays["cu_seqlens"]
    padded = policy.attention == "sdpa"
    s0, s1 = rank_sample_range(cu, rank, world)
    ranges = [(r, 1.0) for r in _micro_ranges(cu, s0, s1, cfg.micro_batch_tokens, padded)]
    if world > 1:  # equal micro-batch counts; fillers are zero-weight repeats
        most = int(_all_reduce([len(ranges)], device, "max")[0])
        filler = ranges[0][0] if ranges else (0, 1)
        ranges += [(filler, 0.0)] * (most - len(ranges))

    policy.model.train()
    optimizer.zero_grad(set_to_none=True)
    totals = dict.fromkeys(_SUMMED, 0.0)
    n_positions = 0
    load = ExpertLoad.for_model(policy.model, device)  # MoE: tokens per expert per layer
    for (m0, m1), weight in ranges:
        mb = build_micro_batch(arrays, m0, m1, policy.attention, device)
        with replaying(policy, mb):  # routing replay stays on through backward
            logp, entropy = micro_batch_logprobs(
                policy,
                mb,
                cfg.logprob_chunk_size,
                autocast_dtype(cfg),
                lm_head_dtype(cfg),
                fused_head=cfg.compile and device.type == "cuda",
            )
            loss, metrics = policy_loss(
                cfg.loss,
                logp,
                mb.logp_inf,
                mb.advantages,
                torch.ones_like(mb.targets, dtype=torch.bool),
                eps_low=cfg.eps_low,
                eps_high=cfg.eps_high,
                tis_cap=cfg.tis_cap,
                n_tokens=n_trained,
                negative_scale=cfg.negative_advantage_scale,
            )
            (loss * weight).backward()
        if weight:
            metrics["entropy"] = float(entropy.sum()) / n_trained
            for key in _SUMMED:
                totals[key] += metrics[key]
            n_positions += mb.n_positions
            if load is not None:
                load.add(token_rows(arrays, m0, m1, policy.attention))
                load.replayed = mb.routed_experts is not None
    if world > 1:
        summed = _all_reduce([totals[k] for k in _SUMMED] + [n_positions], device, "sum")
        totals = dict(zip(_SUMMED, summed[:-1]))
        n_positions = int(summed[-1])
        if load is not None:
            load.all_reduce()
    params = [p for p in policy.model.parameters() if p.requires_grad]
    grad_norm = _clip_grad_norm(params, cfg.max_grad_norm)
    finite = bool(torch.isfinite(grad_norm))
    if finite:  # a non-finite gradient would poison the weights: skip the update, report it
        optimizer.step()
        if policy.after_optimizer_step is not None:
            policy.after_optimizer_step()
    optimizer.zero_grad(set_to_none=True)
    return {
        **totals,
        "grad_norm": float(grad_norm),
        "skipped_update": not finite,
        "n_samples": int(len(cu) - 1),
        "n_tokens": len(arrays["tokens"]),
        "n_trained_tokens": n_trained,
        "masked_fraction": n_trained / len(arrays["tokens"]),
        "padding_fraction": 1.0 - len(arrays["tokens"]) / max(n_positions, 1),
        **(load.metrics() if load is not None else {}),
    }
