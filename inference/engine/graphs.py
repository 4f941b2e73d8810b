"""Decode steps over a `StaticCache` through fixed input buffers, replayed as CUDA graphs.

One graph per (batch bucket, width bucket), captured the first time that pair is needed (so a
workload pays only for the shapes it uses) into one shared memory pool. Inputs are copied into
fixed buffers before each replay; the logits buffer of a graph stays valid until the next replay
of any graph, so callers copy what they need (`StaticDecoder.step` indexes it at once).

Capturing computes the step it captures: the warm-up runs before capture are that same step run
eagerly, and writing a token's K/V twice at the same position from the same inputs is harmless.
"""

from __future__ import annotations

import logging

import torch

from inference.engine.static import StaticCache, width_bucket

log = logging.getLogger(__name__)


def batch_buckets(max_batch: int) -> list[int]:
    """1, 2, 4, 8, then multiples of 8 up to `max_batch` (which is always a bucket)."""
    out = [b for b in (1, 2, 4) if b < max_batch]
    out += list(range(8, max_batch, 8))
    return sorted({*out, max_batch})


class StaticDecoder:
    """Runs `StaticCache.decode` for rows [0, B) with B and width rounded up to buckets."""

    def __init__(self, cache: StaticCache, use_graphs: bool) -> None:
        self.cache = cache
        self.use_graphs = use_graphs and cache.device.type == "cuda"
        self.buckets = batch_buckets(cache.slots)
        self.ids = torch.zeros(cache.slots, dtype=torch.long, device=cache.device)
        self.positions = torch.zeros(cache.slots, dtype=torch.long, device=cache.device)
        self._graphs: dict[tuple[int, int], tuple[torch.cuda.CUDAGraph, torch.Tensor]] = {}
        self._pool = torch.cuda.graph_pool_handle() if self.use_graphs else None
        self.captures = 0

    def bucket(self, rows: int) -> int:
        return next(b for b in self.buckets if b >= rows)

    def step(self, slots: list[int], tokens: list[int], positions: list[int]) -> torch.Tensor:
        """Decode `tokens[i]` at `positions[i]` in slot `slots[i]`; float32 logits [n, vocab]
        in the order of `slots`."""
        b = self.bucket(max(slots) + 1)
        width = width_bucket(max(positions) + 1, self.cache.capacity)
        ids = torch.zeros(b, dtype=torch.long)
        pos = torch.zeros(b, dtype=torch.long)
        index = torch.tensor(slots, dtype=torch.long)
        ids[index] = torch.tensor(tokens, dtype=torch.long)
        pos[index] = torch.tensor(positions, dtype=torch.long)
        self.ids[:b].copy_(ids, non_blocking=True)
        self.positions[:b].copy_(pos, non_blocking=True)
        logits = self._run(b, width)
        return logits[index.to(logits.device)]

    def _run(self, b: int, width: int) -> torch.Tensor:
        if not self.use_graphs:
            return self.cache.decode(self.ids[:b], self.positions[:b], width)
        entry = self._graphs.get((b, width))
        if entry is None:
            entry = self._graphs[(b, width)] = self._capture(b, width)
        graph, logits = entry
        graph.replay()
        return logits

    def _capture(self, b: int, width: int) -> tuple[torch.cuda.CUDAGraph, torch.Tensor]:
        ids, pos = self.ids[:b], self.positions[:b]
        stream = torch.cuda.Stream(device=self.cache.device)
        stream.wait_stream(torch.cuda.current_stream(self.cache.device))
        with torch.cuda.stream(stream):
            for _ in range(2):
                self.cache.decode(ids, pos, width)
        torch.cuda.current_stream(self.cache.device).wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, pool=self._pool):
            logits = self.cache.decode(ids, pos, width)
        self.captures += 1
        log.info("captured decode graph batch=%d width=%d", b, width)
        return graph, logits
