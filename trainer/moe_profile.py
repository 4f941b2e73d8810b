"""Where an MoE layer's forward time goes: routing, dispatch, expert compute, combine.

With `trainer.profile_moe` on, forward hooks on every torchtitan MoE layer and its `router`,
`experts` and `shared_experts` submodules put time marks (CUDA events on GPU, so the step is not
synchronised; `perf_counter` on CPU) and `MoEPhaseTimer.take()` turns them into per-layer
milliseconds once per step:

- `route`:    the router (gate matmul, softmax, top-k);
- `dispatch`: sorting tokens by expert and gathering them, plus, under expert parallelism, the
  all-to-all that torchtitan runs in a pre-hook of `experts` (our outer hook runs before it, our
  inner hook after it);
- `experts`:  the grouped expert matmuls;
- `combine`:  the all-to-all back (expert parallelism) and the un-sort + weighted sum;
- `shared`:   the shared experts, when the model has them.

Forward only: backward time is not split. Recomputation under activation checkpointing (hooks
fired while autograd runs backward) is not counted twice. Inside `torch.compile`d blocks the
hooks break the graph, so a profiled step is slower than an unprofiled one: turn it on to
diagnose, not for throughput runs.
"""

from __future__ import annotations

import time
from collections import defaultdict

import torch
from torch import nn

PHASES = ("route", "dispatch", "experts", "combine", "shared")


def _in_backward() -> bool:
    return torch._C._current_graph_task_id() != -1


class _Clock:
    def __init__(self, device: torch.device) -> None:
        self.cuda = device.type == "cuda"

    def mark(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def ms(self, a, b) -> float:
        return a.elapsed_time(b) if self.cuda else (b - a) * 1e3


class MoEPhaseTimer:
    """Hooks on every MoE layer of `model`; `take()` returns and resets the step's figures."""

    def __init__(self, model: nn.Module) -> None:
        from swefleet.trainer.router_replay import moe_layers

        self.layers = moe_layers(model)
        param = next(model.parameters())
        self.clock = _Clock(param.device)
        self.marks: dict[int, list[dict]] = defaultdict(list)
        self.handles = []
        for i, moe in enumerate(self.layers):
            self._hook_layer(i, moe)

    def _mark(self, layer: int, name: str):
        def hook(*_args):
            if _in_backward():
                return
            calls = self.marks[layer]
            if name == "moe_start":
                calls.append({})
            if calls:
                calls[-1][name] = self.clock.mark()

        return torch._dynamo.disable(hook)

    def _hook_layer(self, i: int, moe: nn.Module) -> None:
        pre, post = nn.Module.register_forward_pre_hook, nn.Module.register_forward_hook
        spec = [(moe, pre, "moe_start", True), (moe.router, post, "router_end", False),
                (moe.experts, pre, "experts_start", True), (moe.experts, pre, "compute_start", False),
                (moe.experts, post, "compute_end", True), (moe.experts, post, "experts_end", False),
                (moe, post, "moe_end", False)]
        if getattr(moe, "shared_experts", None) is not None:
            spec += [(moe.shared_experts, pre, "shared_start", True),
                     (moe.shared_experts, post, "shared_end", False)]
        for module, register, name, first in spec:
            self.handles.append(register(module, self._mark(i, name), prepend=first))

    def take(self) -> dict[str, float]:
        """`moe/<phase>_ms` summed over layers and `moe/layer<i>/<phase>_ms`, for the forward
        calls since the last `take()`; empty when no MoE forward ran."""
        if self.clock.cuda:
            torch.cuda.synchronize()
        out: dict[str, float] = {}
        totals = dict.fromkeys(PHASES, 0.0)
        calls = 0
        for i, layer_calls in sorted(self.marks.items()):
            per = dict.fromkeys(PHASES, 0.0)
            for m in layer_calls:
                if "moe_end" not in m:
                    continue
                for phase, ms in self._phases(m).items():
                    per[phase] += ms
                calls += 1
            for phase, ms in per.items():
                out[f"moe/layer{i}/{phase}_ms"] = ms
                totals[phase] += ms
        self.marks.clear()
        if not calls:
            return {}
        out.update({f"moe/{phase}_ms": ms for phase, ms in totals.items()})
        out["moe/forward_calls"] = float(calls)
        return out

    def _phases(self, m: dict) -> dict[str, float]:
        ms = self.clock.ms
        shared = ms(m["shared_start"], m["shared_end"]) if "shared_end" in m else 0.0
        return {
            "route": ms(m["moe_start"], m["router_end"]),
            "dispatch": ms(m["router_end"], m["compute_start"]),
            "experts": ms(m["compute_start"], m["compute_end"]),
            "combine": ms(m["compute_end"], m["moe_end"]) - shared,
            "shared": shared,
        }

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
