"""Per-expert load of an MoE training step: tokens each expert received, per layer (hot spots).

Counted from the ids every router actually used (`ReplayRouter.last_ids`: the replayed ids when
the batch has `routed_experts`, else the model's own top-k), on the real tokens of each
micro-batch only (sdpa padding excluded), summed over micro-batches and FSDP ranks. Each token
counts once per chosen expert, so every layer's counts sum to tokens x top_k.
"""

from __future__ import annotations

import numpy as np
import torch
from swefleet.trainer import router_replay


def token_rows(arrays: dict[str, np.ndarray], s0: int, s1: int, attention: str) -> np.ndarray:
    """Flattened forward rows of the real tokens of samples [s0, s1) (the layout of
    `trainer.forward.build_micro_batch`: sdpa pads every sample to the longest)."""
    cu = arrays["cu_seqlens"]
    t0, t1 = int(cu[s0]), int(cu[s1])
    if attention != "sdpa":
        return np.arange(t1 - t0)
    lengths = np.diff(cu[s0 : s1 + 1])
    width = int(lengths.max())
    return np.repeat(np.arange(len(lengths)), lengths) * width + arrays["positions"][t0:t1]


class ExpertLoad:
    """Accumulates [moe_layers, num_experts] token counts over a step's micro-batches."""

    def __init__(self, model: torch.nn.Module, device: torch.device) -> None:
        self.model = model
        layers = router_replay.moe_layers(model)
        self.num_experts = int(layers[0].router.num_experts)
        self.top_k = int(layers[0].router.top_k)
        self.counts = torch.zeros(len(layers), self.num_experts, dtype=torch.int64, device=device)
        self.replayed = False

    @classmethod
    def for_model(cls, model: torch.nn.Module, device: torch.device) -> ExpertLoad | None:
        return cls(model, device) if router_replay.moe_layers(model) else None

    def add(self, rows: np.ndarray) -> None:
        """Count the routing of the last forward at the given flattened rows."""
        ids = router_replay.recorded_routing(self.model)  # [positions, layers, top_k]
        index = torch.from_numpy(np.ascontiguousarray(rows, dtype=np.int64)).to(ids.device)
        ids = ids.index_select(0, index).transpose(0, 1).reshape(len(self.counts), -1)
        offset = torch.arange(len(self.counts), device=ids.device)[:, None] * self.num_experts
        flat = torch.bincount((ids + offset).reshape(-1), minlength=self.counts.numel())
        self.counts += flat.view_as(self.counts).to(self.counts.device)

    def all_reduce(self) -> None:
        import torch.distributed as dist

        dist.all_reduce(self.counts, op=dist.ReduceOp.SUM)

    def metrics(self) -> dict:
        return load_metrics(self.counts.cpu().numpy(), self.replayed)


def load_metrics(counts: np.ndarray, replayed: bool) -> dict:
    """Step metrics from [layers, experts] counts: the full counts and a hot-spot summary."""
    mean = counts.mean(axis=1, keepdims=True)
    safe = np.where(mean > 0, mean, 1.0)
    hot = counts / safe
    layer, expert = np.unravel_index(int(np.argmax(hot)), hot.shape)
    std = counts.std(axis=1, keepdims=True)
    return {
        "moe_replay": 1.0 if replayed else 0.0,
        "moe_load": counts.astype(int).tolist(),
        "moe_load_max_over_mean": float(hot.max()),
        "moe_load_min_over_mean": float(hot.min()),
        "moe_load_cv": float((std / safe).mean()),
        "moe_hot_layer": int(layer),
        "moe_hot_expert": int(expert),
        "moe_dead_experts": int((counts == 0).sum()),
    }
