"""RL policy losses as pure per-token functions (no model, no config objects).

Inputs are 1-D tensors over the same tokens: `logp` (trainer log pi, with gradient),
`logp_inf` (inference-server log mu), `adv` (advantage per token), `mask` (bool: tokens trained
on). The importance ratio is r = pi / mu: the sampler is the anchor ("bypass" mode, one forward
per step; TitanRL / prime-rl style), which also corrects for trainer/inference numerics and
staleness.

Normalisation: every returned loss and metric is a token SUM divided by `n_tokens`, the number
of trained tokens in the whole step (all micro-batches, all ranks). So the values of the
micro-batches of one step simply add up to the step's token means, and gradient accumulation
equals one large batch. The two KL metrics (`version_kls`) follow the same rule with their own
token counts: `mismatch_kl` over the step's fresh tokens (sampled by the policy version the
trainer holds: engine vs trainer numerics), `staleness_kl` over its stale ones (sampled by an
older version: how far the policy has moved since).

Truncated IS (`tis_cap`): a token's gradient weight (r for `dapo`, the clipped weight for
`cispo`) never exceeds the cap; bigger weights are truncated to it (value and gradient).
"""

from __future__ import annotations

import torch

#: |log r| beyond this is treated as this (keeps exp() finite; such tokens are broken anyway)
MAX_LOG_RATIO = 20.0


def _log_ratio(logp: torch.Tensor, logp_inf: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    d = torch.where(mask, logp - logp_inf, torch.zeros_like(logp))
    return d.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)


def _sum(x: torch.Tensor, mask: torch.Tensor, n_tokens: int) -> torch.Tensor:
    return torch.where(mask, x, torch.zeros_like(x)).sum() / n_tokens


def mismatch_kl(
    logp: torch.Tensor, logp_inf: torch.Tensor, mask: torch.Tensor, n_tokens: int
) -> torch.Tensor:
    """Sum over masked tokens of exp(d) - d - 1, d = logp - logp_inf, divided by n_tokens
    (the k3 estimator of KL(mu || pi) under samples from mu). No gradient."""
    with torch.no_grad():
        d = _log_ratio(logp.detach(), logp_inf, mask)
        return _sum(torch.expm1(d) - d, mask, n_tokens)


def version_kls(
    logp: torch.Tensor,
    logp_inf: torch.Tensor,
    mask: torch.Tensor,
    stale: torch.Tensor | None,
    n_fresh: int,
    n_stale: int,
) -> dict[str, float | None]:
    """The k3 KL of `mismatch_kl`, split by who sampled the token. `stale` (bool per token,
    None: none is) marks tokens sampled by an older policy version than the trainer's.
    `mismatch_kl`: sum over fresh masked tokens / `n_fresh`; `staleness_kl`: sum over stale
    masked tokens / `n_stale` (the step's counts of each kind, all micro-batches and ranks).
    A kind the step has no token of (count 0) is None: no value, rather than a 0."""
    fresh = mask if stale is None else mask & ~stale
    out: dict[str, float | None] = {"mismatch_kl": None, "staleness_kl": None}
    if n_fresh:
        out["mismatch_kl"] = float(mismatch_kl(logp, logp_inf, fresh, n_fresh))
    if n_stale:
        gone = torch.zeros_like(mask) if stale is None else mask & stale
        out["staleness_kl"] = float(mismatch_kl(logp, logp_inf, gone, n_stale))
    return out


def _truncate(weight: torch.Tensor, cap: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    """weight * sg(min(1, cap / weight)): value and gradient scale capped at `cap`."""
    if cap is None:
        return weight, torch.zeros_like(weight, dtype=torch.bool)
    over = weight.detach() > cap
    scale = torch.where(over, cap / weight.detach(), torch.ones_like(weight))
    return weight * scale, over


def dapo_loss(
    logp: torch.Tensor,
    logp_inf: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float,
    eps_high: float,
    tis_cap: float | None,
    n_tokens: int,
) -> tuple[torch.Tensor, dict[str, float]]:
    """PPO/DAPO clipped surrogate, maximised: min(r A, clip(r, 1-eps_low, 1+eps_high) A), with
    r truncated at `tis_cap` in the unclipped branch. Returns (-sum / n_tokens, metrics)."""
    d = _log_ratio(logp, logp_inf, mask)
    ratio, truncated = _truncate(torch.exp(d), tis_cap)
    clipped = torch.exp(d).clamp(1.0 - eps_low, 1.0 + eps_high)
    surrogate = torch.minimum(ratio * adv, clipped * adv)
    r = torch.exp(d.detach())
    clip_hit = ((adv > 0) & (r > 1.0 + eps_high)) | ((adv < 0) & (r < 1.0 - eps_low))
    loss = -_sum(surrogate, mask, n_tokens)
    return loss, _metrics(loss, r, clip_hit, truncated & ~clip_hit, mask, n_tokens)


def cispo_loss(
    logp: torch.Tensor,
    logp_inf: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float,
    eps_high: float,
    tis_cap: float | None,
    n_tokens: int,
) -> tuple[torch.Tensor, dict[str, float]]:
    """CISPO: REINFORCE with a stop-gradient clipped IS weight, maximised:
    sg(min(clip(r, 1-eps_low, 1+eps_high), tis_cap)) * A * logp. Returns (-sum / n_tokens, metrics)."""
    d = _log_ratio(logp, logp_inf, mask).detach()
    r = torch.exp(d)
    weight = r.clamp(1.0 - eps_low, 1.0 + eps_high)
    weight, truncated = _truncate(weight, tis_cap)
    clip_hit = (r < 1.0 - eps_low) | (r > 1.0 + eps_high)
    loss = -_sum(weight * adv * logp, mask, n_tokens)
    return loss, _metrics(loss, r, clip_hit, truncated, mask, n_tokens)


def _metrics(
    loss: torch.Tensor,
    r: torch.Tensor,
    clip_hit: torch.Tensor,
    truncated: torch.Tensor,
    mask: torch.Tensor,
    n_tokens: int,
) -> dict[str, float]:
    f = torch.float32
    return {
        "loss": float(loss.detach()),
        "ratio_mean": float(_sum(r, mask, n_tokens)),
        "clip_fraction": float(_sum(clip_hit.to(f), mask, n_tokens)),
        "tis_fraction": float(_sum(truncated.to(f), mask, n_tokens)),
    }


def sft_loss(
    logp: torch.Tensor,
    logp_inf: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float,
    eps_high: float,
    tis_cap: float | None,
    n_tokens: int,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Supervised fine-tuning: the negative log-likelihood of the trained (model) tokens,
    -sum(logp) / n_tokens, i.e. cross-entropy on the assistant tokens only. Advantages,
    inference logprobs and the clip/IS knobs do not enter (same signature as the RL losses)."""
    loss = -_sum(logp, mask, n_tokens)
    zero = torch.zeros_like(logp, dtype=torch.bool)
    return loss, _metrics(loss, torch.ones_like(logp), zero, zero, mask, n_tokens)


LOSSES = {"dapo": dapo_loss, "cispo": cispo_loss, "sft": sft_loss}


def policy_loss(
    name: str,
    logp: torch.Tensor,
    logp_inf: torch.Tensor,
    adv: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float,
    eps_high: float,
    tis_cap: float | None,
    n_tokens: int,
    negative_scale: float = 1.0,
    stale: torch.Tensor | None = None,
    n_stale: int = 0,
) -> tuple[torch.Tensor, dict[str, float | None]]:
    """Dispatch to `dapo_loss` / `cispo_loss` / `sft_loss` and add `version_kls`'s
    `mismatch_kl` and `staleness_kl` to the metrics (`stale` marks the tokens of older policy
    versions, `n_stale` counts them in the step; the fresh count is `n_tokens - n_stale`). For
    `sft` both are None: its tokens were not sampled by an inference server. Negative advantages
    are multiplied by `negative_scale` first (`trainer.negative_advantage_scale`)."""
    if negative_scale != 1.0:
        adv = torch.where(adv < 0, adv * negative_scale, adv)
    loss, metrics = LOSSES[name](
        logp,
        logp_inf,
        adv,
        mask,
        eps_low=eps_low,
        eps_high=eps_high,
        tis_cap=tis_cap,
        n_tokens=n_tokens,
    )
    if name == "sft":
        metrics.update(mismatch_kl=None, staleness_kl=None)
    else:
        metrics.update(version_kls(logp, logp_inf, mask, stale, n_tokens - n_stale, n_stale))
    return loss, metrics
