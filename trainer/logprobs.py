"""Token log-probs and entropies with a chunked lm_head and an fp32 log-softmax.

Only the rows that are trained on go through the lm_head, `chunk_size` rows at a time; with
gradients on, each chunk is recomputed in backward (activation checkpointing), so the
[rows, vocab] fp32 logits never exist for more than one chunk.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


def _chunk_logprobs(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.autocast(device_type=hidden.device.type, enabled=False):
        logits = F.linear(hidden.float(), weight.float())
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    with torch.no_grad():
        entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


def token_logprobs(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, chunk_size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """log p(targets[i] | hidden[i]) and the entropy of that distribution, for rows [N, dim]
    of `hidden` and the lm_head `weight` [vocab, dim]. Returns (logp [N] fp32, entropy [N] fp32,
    the entropy without gradient)."""
    if hidden.shape[0] != targets.shape[0]:
        raise ValueError(f"{hidden.shape[0]} hidden rows but {targets.shape[0]} targets")
    logps, entropies = [], []
    needs_grad = torch.is_grad_enabled() and (hidden.requires_grad or weight.requires_grad)
    for start in range(0, hidden.shape[0], chunk_size):
        h, t = hidden[start : start + chunk_size], targets[start : start + chunk_size]
        if needs_grad:
            logp, ent = checkpoint(_chunk_logprobs, h, weight, t, use_reentrant=False)
        else:
            logp, ent = _chunk_logprobs(h, weight, t)
        logps.append(logp)
        entropies.append(ent)
    if not logps:
        empty = hidden.new_zeros(0, dtype=torch.float32)
        return empty, empty
    return torch.cat(logps), torch.cat(entropies)
