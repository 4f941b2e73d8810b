"""Routed experts of MoE models (router replay, R3): which experts every layer chose per token.

`RoutingCapture.attach(model)` puts a forward hook on each MoE router of a transformers model
(`*TopKRouter` modules: Qwen3-MoE, Qwen2-MoE, ...; their output is `(logits, scores, top-k ids)`)
and returns None for a dense model. The engine brackets each forward it runs:

    capture.start(); logits = kv.prefill(prompts); capture.after_prefill(ids, prompt_lens)
    capture.start(); logits = kv.decode(tokens);   capture.after_decode(ids)

and `pop(seq_id)` gives the sequence's array when it finishes: shape
`(prompt + generated - 1, num_hidden_layers, top_k)`, dtype uint8 (<= 256 experts) or uint16,
exactly vLLM 0.26.0's `routed_experts` (see `swefleet/routed_experts.py`): rows for the prompt
tokens, then one row per decode step (the token fed in), none for the last sampled token. A
dense layer's column stays 0, as in vLLM.

Forward layouts understood (checked by row counts, anything else raises): prefill as one forward
per prompt or as one right-padded [prompts, width] batch; decode as one row per running sequence
(rows past the batch, e.g. a padded bucket, ignored). Hooks do not fire inside a replayed CUDA
graph: a backend that replays graphs for an MoE model must record the ids itself.

Prefix cache: tokens whose KV comes from a cache were not forwarded, so their routing must come
from the cache too. Store `routing(seq_id)[:n]` with the cached KV of the first n tokens and pass
it back as `cached_routing[i]` to `after_prefill`; the rows then stay those the KV was computed
with (vLLM does the same: its routing buffer is indexed by KV slot). MoE models run on
`DynamicKV`, whose prefix store parks each finished sequence's routing (handed over by the engine
when its row is dropped) with its K/V and returns the first n rows on a hit; a backend that
reports cached tokens without their routing makes `after_prefill` raise.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from swefleet.routed_experts import expert_dtype

_LAYER = re.compile(r"(?:^|\.)layers\.(\d+)\.")


def find_routers(model: Any) -> list[tuple[int, torch.nn.Module]]:
    """(decoder layer index, router module) of every MoE router, in layer order."""
    found = []
    for name, module in model.named_modules():
        if type(module).__name__.endswith("TopKRouter") and hasattr(module, "top_k"):
            match = _LAYER.search(name)
            if match is None:
                raise ValueError(f"MoE router {name!r} is not inside a numbered decoder layer")
            found.append((int(match.group(1)), module))
    return sorted(found, key=lambda pair: pair[0])


class RoutingCapture:
    """Per-sequence routed expert ids recorded from the routers' forward hooks."""

    def __init__(self, routers: list[tuple[int, torch.nn.Module]], num_layers: int) -> None:
        self.num_layers = num_layers
        self.top_k = int(routers[0][1].top_k)
        self.num_experts = int(routers[0][1].num_experts)
        self.dtype = expert_dtype(self.num_experts)
        self._recording = False
        self._pending: list[tuple[int, torch.Tensor]] = []
        self._seqs: dict[str, list[np.ndarray]] = {}
        self._handles = [r.register_forward_hook(self._hook(i)) for i, r in routers]

    @classmethod
    def attach(cls, model: Any) -> RoutingCapture | None:
        """A capture hooked into `model`'s routers; None when the model has no MoE router."""
        routers = find_routers(model)
        if not routers:
            return None
        return cls(routers, int(model.config.num_hidden_layers))

    def detach(self) -> None:
        for handle in self._handles:
            handle.remove()

    def _hook(self, layer: int):
        def hook(_module: Any, _args: Any, output: Any) -> None:
            if self._recording:
                self._pending.append((layer, output[2].detach()))

        return hook

    # ---- called by the engine around each forward ----

    def start(self) -> None:
        """Record the routers from now on (forgets anything recorded before)."""
        self._pending = []
        self._recording = True

    def _calls(self) -> list[np.ndarray]:
        """The recorded forwards, each [rows, num_layers, top_k] in the id dtype."""
        self._recording = False
        calls: list[dict[int, torch.Tensor]] = []
        for layer, ids in self._pending:
            if not calls or layer in calls[-1] or layer < max(calls[-1]):
                calls.append({})
            calls[-1][layer] = ids
        self._pending = []
        out = []
        for call in calls:
            rows = {ids.shape[0] for ids in call.values()}
            if len(rows) != 1:
                raise RuntimeError(f"routers of one forward saw different token counts: {rows}")
            first = next(iter(call.values()))
            dense = torch.zeros(
                first.shape[0], self.num_layers, self.top_k, dtype=torch.int32, device=first.device
            )
            for layer, ids in call.items():
                dense[:, layer] = ids
            out.append(dense.cpu().numpy().astype(self.dtype))
        return out

    def after_prefill(
        self,
        seq_ids: Sequence[str],
        prompt_lens: Sequence[int],
        cached_tokens: Sequence[int] = (),
        cached_routing: Sequence[np.ndarray | None] = (),
    ) -> None:
        """Assign the prefill's rows. Sequence i's first `cached_tokens[i]` prompt tokens came
        from a prefix cache (not forwarded): their rows must be given as `cached_routing[i]`."""
        cached_tokens = list(cached_tokens) or [0] * len(seq_ids)
        cached_routing = list(cached_routing) or [None] * len(seq_ids)
        for seq_id, n, rows in zip(seq_ids, cached_tokens, cached_routing, strict=True):
            if n and (rows is None or len(rows) != n):
                raise RuntimeError(
                    f"{seq_id}: {n} prompt tokens came from the prefix cache without their routed "
                    "experts; store them with the cached K/V (see inference/engine/experts.py) "
                    "or turn the prefix cache off for MoE models"
                )
        forwarded = [p - n for p, n in zip(prompt_lens, cached_tokens, strict=True)]
        pieces = _split_prefill(self._calls(), forwarded)
        for seq_id, prefix, rows in zip(seq_ids, cached_routing, pieces, strict=True):
            chunks = [rows] if prefix is None else [prefix.astype(self.dtype), rows]
            self._seqs[seq_id] = chunks

    def after_decode(self, seq_ids: Sequence[str]) -> None:
        """One row per running sequence (the token it was fed), in batch order."""
        calls = self._calls()
        if len(calls) != 1 or len(calls[0]) < len(seq_ids):
            got = [len(c) for c in calls]
            raise RuntimeError(f"decode of {len(seq_ids)} rows recorded router calls {got}")
        for i, seq_id in enumerate(seq_ids):
            self._seqs[seq_id].append(calls[0][i : i + 1])

    # ---- results ----

    def routing(self, seq_id: str) -> np.ndarray | None:
        """Rows recorded so far for `seq_id` (one per forwarded or cached token), or None."""
        chunks = self._seqs.get(seq_id)
        return None if chunks is None else np.concatenate(chunks)

    def pop(self, seq_id: str) -> np.ndarray | None:
        """The finished sequence's array; None if it never reached a forward."""
        out = self.routing(seq_id)
        self._seqs.pop(seq_id, None)
        return out


class NoCapture:
    """Stands in for `RoutingCapture` on dense models (or with capture off): records nothing."""

    def start(self) -> None:
        pass

    def after_prefill(self, *args: Any, **kwargs: Any) -> None:
        pass

    def after_decode(self, seq_ids: Sequence[str]) -> None:
        pass

    def routing(self, seq_id: str) -> None:
        return None

    def pop(self, seq_id: str) -> None:
        return None


def make_capture(model: Any, enabled: bool = True) -> RoutingCapture | NoCapture:
    """A `RoutingCapture` for an MoE model when `enabled`, else a `NoCapture`."""
    capture = RoutingCapture.attach(model) if enabled else None
    return NoCapture() if capture is None else capture


def _split_prefill(calls: list[np.ndarray], forwarded: list[int]) -> list[np.ndarray]:
    """Per-prompt rows of a prefill: one forward per prompt (rows back to back) or one
    right-padded [prompts, width] forward."""
    total = sum(len(c) for c in calls)
    if total == sum(forwarded):
        flat = np.concatenate(calls) if calls else np.zeros((0,))
        bounds = np.cumsum([0, *forwarded])
        return [flat[a:b] for a, b in itertools.pairwise(bounds)]
    width = max(forwarded)
    if len(calls) == 1 and total == len(forwarded) * width:
        grid = calls[0].reshape(len(forwarded), width, *calls[0].shape[1:])
        return [grid[i, :n] for i, n in enumerate(forwarded)]
    raise RuntimeError(
        f"prefill of {len(forwarded)} prompts ({sum(forwarded)} tokens forwarded) recorded "
        f"router calls of {[len(c) for c in calls]} rows: unknown layout (a prefix cache must pass "
        "the cached tokens' routing as `cached`)"
    )
