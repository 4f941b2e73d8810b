"""Decode steps over a `StaticCache` through fixed input buffers, replayed as CUDA graphs.

One graph per (batch bucket, width bucket), captured the first time that pair is needed (so a
workload pays only for the shapes it uses) into one shared memory pool. A graph holds the whole
step: the forward and the sampler (`sampling.batched_sample`), so a step costs one host-to-device
copy (token, position, temperature, uniform per row, packed in one float64 tensor), one replay
and one small device-to-host copy (token and logprob per row). Rows that need top-p or top
logprobs are sampled eagerly from the graph's logits buffer, which stays valid until the next
replay of any graph.

Capturing computes the step it captures: the warm-up runs before capture are that same step run
eagerly, and writing a token's K/V twice at the same position from the same inputs is harmless.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from swefleet.inference.engine.sampling import (
    RowParams,
    Sampled,
    batched_sample,
    draw_uniforms,
    needs_eager,
    sample,
)
from swefleet.inference.engine.static import StaticCache, width_bucket

log = logging.getLogger(__name__)


def batch_buckets(max_batch: int) -> list[int]:
    """1, 2, 4, 8, then multiples of 8 up to `max_batch` (which is always a bucket)."""
    out = [b for b in (1, 2, 4) if b < max_batch]
    out += list(range(8, max_batch, 8))
    return sorted({*out, max_batch})


class StaticDecoder:
    """Runs `StaticCache.decode` + sampling for rows [0, B) with B and width rounded up to
    buckets."""

    def __init__(self, cache: StaticCache, use_graphs: bool) -> None:
        self.cache = cache
        self.use_graphs = use_graphs and cache.device.type == "cuda"
        self.buckets = batch_buckets(cache.slots)
        # rows: token id, position, temperature, uniform (exact in float64)
        self.inputs = torch.zeros(4, cache.slots, dtype=torch.float64, device=cache.device)
        self._graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, Any, Any]] = {}
        self._pool = torch.cuda.graph_pool_handle() if self.use_graphs else None
        self.captures = 0

    def bucket(self, rows: int) -> int:
        return next(b for b in self.buckets if b >= rows)

    def step(
        self,
        slots: list[int],
        tokens: list[int],
        positions: list[int],
        rows: list[RowParams],
        park: list[int],
    ) -> Sampled:
        """Decode `tokens[i]` at `positions[i]` in slot `slots[i]` and sample the next token
        with `rows[i]`; results in the order of `slots`. Bucket rows not in `slots` are fed at
        `park[slot]` (a position whose K/V may be overwritten)."""
        b = self.bucket(max(slots) + 1)
        width = width_bucket(max(positions) + 1, self.cache.capacity)
        u = draw_uniforms(rows)
        ids, pos, temps, us = [0] * b, park[:b], [0.0] * b, [0.0] * b
        for i, slot in enumerate(slots):
            ids[slot], pos[slot], temps[slot], us[slot] = (
                tokens[i],
                positions[i],
                rows[i].temperature,
                u[i],
            )
        host = torch.tensor([ids, pos, temps, us], dtype=torch.float64)
        self.inputs[:, :b].copy_(host, non_blocking=True)
        logits, packed = self._run(b, width)
        if needs_eager(rows):
            index = torch.tensor(slots, dtype=torch.long, device=logits.device)
            return sample(logits[index], rows, u)
        out = packed.cpu()  # [2, b]: token, logprob
        return Sampled(out[0, slots].long().tolist(), out[1, slots].tolist(), [[] for _ in rows])

    def _forward(self, b: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        ids, pos = self.inputs[0, :b].long(), self.inputs[1, :b].long()
        logits = self.cache.decode(ids, pos, width)
        tokens, chosen = batched_sample(logits, self.inputs[2, :b].float(), self.inputs[3, :b])
        return logits, torch.stack([tokens.double(), chosen.double()])

    def _run(self, b: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.use_graphs:
            return self._forward(b, width)
        entry = self._graphs.get((b, width))
        if entry is None:
            entry = self._graphs[(b, width)] = self._capture(b, width)
        graph, logits, packed = entry
        graph.replay()
        return logits, packed

    def _capture(
        self, b: int, width: int
    ) -> tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]:
        stream = torch.cuda.Stream(device=self.cache.device)
        stream.wait_stream(torch.cuda.current_stream(self.cache.device))
        with torch.cuda.stream(stream):
            for _ in range(2):
                self._forward(b, width)
        torch.cuda.current_stream(self.cache.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            logits, packed = self._forward(b, width)
        self.captures += 1
        log.info("captured decode graph batch=%d width=%d", b, width)
        return graph, logits, packed
