"""Next-token sampling for a batch of rows, each with its own temperature, top-p and seeded RNG.

Sampling uses the exponential race (argmax of p / E with E ~ Exp(1), an exact draw from p), so
the rows' random numbers come from their own generators while every other operation is batched
and the device is synchronised once per step. A row's draws depend only on its own generator:
the same seed and prompt give the same tokens alone or in any batch.

Reported logprobs are the raw distribution (log-softmax of the logits at temperature 1, before
top-p), as vLLM's default `logprobs_mode="raw_logprobs"`; see `inference/wire.py`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def make_generator(seed: int | None, device: torch.device) -> torch.Generator:
    """A per-request RNG: same seed and prompt give the same tokens, batched or alone."""
    gen = torch.Generator(device=device)
    if seed is None:
        gen.seed()
    else:
        gen.manual_seed(seed & 0xFFFF_FFFF_FFFF_FFFF)
    return gen


@dataclass
class RowParams:
    temperature: float
    top_p: float
    generator: torch.Generator
    top_logprobs: int = 0


@dataclass
class Sampled:
    tokens: list[int]
    logprobs: list[float]
    """Raw logprob of each sampled token."""
    top: list[list[tuple[int, float]]]
    """Per row, its `top_logprobs` best (id, raw logprob); empty when not asked for."""


def top_p_filter(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Per row, keep the smallest set of most likely tokens whose mass reaches `top_p[row]`
    (not renormalised: the exponential race does not need it)."""
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    sorted_probs = sorted_probs.masked_fill(mass_before >= top_p.unsqueeze(-1), 0.0)
    return torch.zeros_like(probs).scatter(-1, order, sorted_probs)


def sample(logits: torch.Tensor, rows: list[RowParams]) -> Sampled:
    """Sample one token per row of float32 `logits` [B, V]; temperature 0 is greedy."""
    device = logits.device
    temps = torch.tensor([r.temperature for r in rows], device=device)
    logprobs = torch.log_softmax(logits, dim=-1)
    greedy = torch.argmax(logits, dim=-1)
    tokens = greedy
    if any(r.temperature > 0 for r in rows):
        probs = torch.softmax(logits / temps.clamp_min(1e-6).unsqueeze(-1), dim=-1)
        if any(r.top_p < 1.0 for r in rows):
            top_p = torch.tensor([r.top_p for r in rows], device=device)
            probs = top_p_filter(probs, top_p)
        noise = torch.stack(
            [torch.empty_like(logits[0]).exponential_(generator=r.generator) for r in rows]
        )
        sampled = torch.argmax(probs / noise, dim=-1)
        tokens = torch.where(temps > 0, sampled, greedy)
    chosen = logprobs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    k = max(r.top_logprobs for r in rows)
    top: list[list[tuple[int, float]]] = [[] for _ in rows]
    if k:
        values, ids = torch.topk(logprobs, k, dim=-1)
        for i, (row_ids, row_values) in enumerate(zip(ids.tolist(), values.tolist(), strict=True)):
            n = rows[i].top_logprobs
            top[i] = list(zip(row_ids[:n], row_values[:n], strict=True))
    return Sampled(tokens.tolist(), chosen.tolist(), top)
