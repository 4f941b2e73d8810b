"""Router replay (R3) for Qwen3-MoE: train with the experts the inference server routed to.

Every MoE layer's router (torchtitan 0.2.2 `TokenChoiceTopKRouter`) is swapped for
`ReplayRouter` when the policy is loaded. Without replay ids it routes like the original (top-k
of the softmax scores). With ids set (`set_replay`), it still computes the full score matrix from
the *current* gate, takes the replayed expert ids instead of its own top-k, gathers the scores at
those ids and then applies `route_norm` / `route_scale` — so the gate keeps its gradient through
the gathered scores while the expert choice is the sampler's (prime-rl's implementation; R3,
arXiv 2510.11370). Keep the ids set until backward has finished: activation checkpointing
re-runs the forward.

Ids per layer are `[tokens, top_k]` int64 in the order the router sees tokens: the forward's
`[B, L]` token grid flattened (padding rows included; any valid id works there). The batch
carries them as `routed_experts [T, moe_layers, top_k]` aligned with `tokens` (vLLM
`--enable-return-routed-experts` gives `(num_tokens - 1, layers, top_k)` per completion: the
orchestrator pads the last token). Load balancing must be off for RL (`load_balance_coeff=None`):
its bias would change the trainer's top-k in a way the server never sees.

torchtitan counts tokens per expert with `torch.histc` on int64 ids, which has no CPU kernel;
both swapped modules count with a float histc (exact for any expert count below 2**24).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _count(ids: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Tokens per expert, int64 (what torchtitan's histc of int64 ids gives on CUDA)."""
    counts = torch.histc(
        ids.reshape(-1).to(torch.float32), bins=num_experts, min=0, max=num_experts
    )
    return counts.to(ids.dtype)


def _router_base():
    from torchtitan.models.moe.moe import TokenChoiceTopKRouter

    return TokenChoiceTopKRouter


def _reorderer_base():
    from torchtitan.models.moe.moe import TokenReorderer

    return TokenReorderer


class ReplayRouter(_router_base()):
    """`TokenChoiceTopKRouter` that can take its expert choice from outside (`replay_ids`)
    and records the ids it used (`last_ids`, detached)."""

    replay_ids: torch.Tensor | None = None
    last_ids: torch.Tensor | None = None

    def forward(
        self, x: torch.Tensor, expert_bias: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.num_expert_groups is not None or self._debug_force_load_balance:
            raise NotImplementedError("ReplayRouter: node-limited / forced routing")
        logits = self.gate(x).to(torch.float32)
        if self.score_func == "softmax":
            scores = F.softmax(logits, dim=1)
        elif self.score_func == "sigmoid":
            scores = torch.sigmoid(logits)
        else:
            raise NotImplementedError(f"score function {self.score_func}")
        if self.replay_ids is not None:
            if self.replay_ids.shape != (x.shape[0], self.top_k):
                raise ValueError(
                    f"replay ids {tuple(self.replay_ids.shape)} for {x.shape[0]} tokens x top "
                    f"{self.top_k}"
                )
            selected = self.replay_ids
        else:
            choice = scores if expert_bias is None else scores + expert_bias
            selected = torch.topk(choice, k=self.top_k, dim=-1, sorted=False)[1]
        top_scores = scores.gather(dim=1, index=selected)
        if self.route_norm:
            top_scores = top_scores / (top_scores.sum(dim=-1, keepdim=True) + 1e-20)
        top_scores = top_scores * self.route_scale
        self.last_ids = selected.detach()
        return top_scores, selected, _count(selected, self.num_experts)


class CountingReorderer(_reorderer_base()):
    """`TokenReorderer` with a float histc (runs on CPU too)."""

    def forward(
        self, top_scores: torch.Tensor, selected_experts_indices: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        counts = _count(selected_experts_indices, self.num_experts)
        order = torch.argsort(selected_experts_indices.view(-1), stable=True)
        return top_scores.view(-1)[order], order, counts


def moe_layers(model: nn.Module) -> list[nn.Module]:
    """The MoE modules of the model, in layer order (compile / AC wrappers looked through)."""
    from torchtitan.models.moe.moe import MoE

    return [m for m in model.modules() if isinstance(m, MoE)]


def install(model: nn.Module) -> int:
    """Swap every MoE layer's router and reorderer for the replay-capable ones (in place: the
    gate keeps its parameter and name). Returns the number of MoE layers."""
    layers = moe_layers(model)
    for moe in layers:
        moe.router.__class__ = ReplayRouter
        moe.reorderer.__class__ = CountingReorderer
        if moe.load_balance_coeff is not None:
            raise ValueError("router replay needs load_balance_coeff=None (no expert bias)")
    return len(layers)


def set_replay(model: nn.Module, routed_experts: torch.Tensor | None) -> None:
    """Route every MoE layer with `routed_experts [tokens, moe_layers, top_k]` (None: clear,
    back to the model's own top-k)."""
    layers = moe_layers(model)
    if routed_experts is not None and routed_experts.shape[1] != len(layers):
        raise ValueError(
            f"routed experts for {routed_experts.shape[1]} layers, model has {len(layers)}"
        )
    for i, moe in enumerate(layers):
        moe.router.replay_ids = (
            None if routed_experts is None else routed_experts[:, i, :].to(torch.int64).contiguous()
        )


def recorded_routing(model: nn.Module) -> torch.Tensor:
    """The ids every MoE layer used in the last forward: [tokens, moe_layers, top_k]."""
    return torch.stack([moe.router.last_ids for moe in moe_layers(model)], dim=1)
