"""Next-token sampling for a batch of rows, each with its own temperature, top-p and seeded RNG.

Sampling is by inverse transform: each row draws ONE uniform `u` per step from its own host-side
RNG (`random.Random`, seeded by the request's seed or by the OS), and the token is the first
whose cumulative probability (float64) exceeds `u` times the row's total mass — an exact draw
from the row's distribution. Everything on the device is then a handful of batched ops with no
per-row launch and no RNG state on the device, so `batched_sample` can run inside the CUDA graph
of a decode step (`graphs.py`). A row's draws depend only on its own RNG: the same seed and
prompt give the same tokens alone or in any batch.

Rows with `top_p < 1` draw over the probabilities sorted in descending order and cut at `top_p`
(a full-vocabulary sort, done eagerly); other rows draw over the vocabulary order. Temperature 0
is greedy (the uniform is still drawn, so a request's RNG stream does not depend on it).

Reported logprobs are the raw distribution (log-softmax of the logits at temperature 1, before
top-p), as vLLM's default `logprobs_mode="raw_logprobs"`; see `inference/wire.py`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch


def make_generator(seed: int | None, device: torch.device | None = None) -> random.Random:
    """A per-request RNG: same seed and prompt give the same tokens, batched or alone.
    (`device` is accepted for compatibility: the draws happen on the host.)"""
    return random.Random() if seed is None else random.Random(seed & 0xFFFF_FFFF_FFFF_FFFF)


@dataclass
class RowParams:
    temperature: float
    top_p: float
    generator: random.Random
    top_logprobs: int = 0


@dataclass
class Sampled:
    tokens: list[int]
    logprobs: list[float]
    """Raw logprob of each sampled token."""
    top: list[list[tuple[int, float]]]
    """Per row, its `top_logprobs` best (id, raw logprob); empty when not asked for."""


def needs_eager(rows: list[RowParams]) -> bool:
    """Top-p or top-logprobs rows: not covered by `batched_sample` (the graph's sampler)."""
    return any(r.top_p < 1.0 or r.top_logprobs for r in rows)


def top_p_filter(probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """Per row, keep the smallest set of most likely tokens whose mass reaches `top_p[row]`
    (not renormalised), in vocabulary order."""
    sorted_probs, order = torch.sort(probs, dim=-1, descending=True)
    sorted_probs = _cut(sorted_probs, top_p)
    return torch.zeros_like(probs).scatter(-1, order, sorted_probs)


def _cut(sorted_probs: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    mass_before = torch.cumsum(sorted_probs, dim=-1) - sorted_probs
    return sorted_probs.masked_fill(mass_before >= top_p.unsqueeze(-1), 0.0)


def _inverse_cdf(probs: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Index of the first entry whose float64 cumulative mass exceeds u * row total."""
    cdf = torch.cumsum(probs.double(), dim=-1)
    target = (u * cdf[:, -1]).unsqueeze(-1)
    return torch.searchsorted(cdf, target, right=True).squeeze(-1).clamp_max(probs.shape[-1] - 1)


def _probs(logits: torch.Tensor, temps: torch.Tensor) -> torch.Tensor:
    return torch.softmax(logits / temps.clamp_min(1e-6).unsqueeze(-1), dim=-1)


def batched_sample(
    logits: torch.Tensor, temps: torch.Tensor, u: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Rows without top-p: tokens [B] (int64) and their raw logprobs [B] (float32). `temps` and
    `u` (float64 in [0, 1)) are per-row tensors on the logits' device; no host sync, no RNG
    state, fixed shapes: safe to capture in a CUDA graph."""
    logprobs = torch.log_softmax(logits, dim=-1)
    drawn = _inverse_cdf(_probs(logits, temps), u)
    tokens = torch.where(temps > 0, drawn, torch.argmax(logits, dim=-1))
    return tokens, logprobs.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def draw_uniforms(rows: list[RowParams]) -> list[float]:
    """One uniform per row from its own RNG (always exactly one per row per step)."""
    return [r.generator.random() for r in rows]


def sample(logits: torch.Tensor, rows: list[RowParams], u: list[float] | None = None) -> Sampled:
    """Sample one token per row of float32 `logits` [B, V] (eagerly; any row parameters).
    `u`: the rows' uniforms when already drawn (else drawn here)."""
    device = logits.device
    u_t = torch.tensor(draw_uniforms(rows) if u is None else u, dtype=torch.float64)
    temps = torch.tensor([r.temperature for r in rows], dtype=torch.float32)
    u_t, temps = u_t.to(device), temps.to(device)
    tokens, chosen = batched_sample(logits, temps, u_t)
    if any(r.top_p < 1.0 for r in rows):
        top_p = torch.tensor([r.top_p for r in rows], device=device)
        sorted_probs, order = torch.sort(_probs(logits, temps), dim=-1, descending=True)
        drawn = order.gather(-1, _inverse_cdf(_cut(sorted_probs, top_p), u_t).unsqueeze(-1))
        use = (top_p < 1.0) & (temps > 0)
        tokens = torch.where(use, drawn.squeeze(-1), tokens)
        chosen = torch.log_softmax(logits, dim=-1).gather(-1, tokens.unsqueeze(-1)).squeeze(-1)
    return Sampled(tokens.tolist(), chosen.tolist(), top_logprobs(logits, rows))


def top_logprobs(logits: torch.Tensor, rows: list[RowParams]) -> list[list[tuple[int, float]]]:
    k = max(r.top_logprobs for r in rows)
    top: list[list[tuple[int, float]]] = [[] for _ in rows]
    if k:
        values, ids = torch.topk(torch.log_softmax(logits, dim=-1), k, dim=-1)
        for i, (row_ids, row_values) in enumerate(zip(ids.tolist(), values.tolist(), strict=True)):
            n = rows[i].top_logprobs
            top[i] = list(zip(row_ids[:n], row_values[:n], strict=True))
    return top
