"""A left-padded batch of per-sequence KV caches that sequences join and leave between steps.

Every row holds one sequence's cached tokens right-aligned; `mask` marks real positions (1) and
left padding (0), `lengths` counts each row's real tokens (its next RoPE position). A sequence
joins after its own prefill (batch of one, no padding): the shorter side is left-padded with
zeros and the rows are concatenated. Leaving rows are dropped with `keep`, and columns that are
padding in every remaining row are trimmed so the cache does not grow without bound.

Works on transformers' `DynamicCache` made of plain `DynamicLayer`s (`layer.keys`, `.values` of
shape [batch, kv_heads, seq, head_dim]); sliding-window layers are refused (left padding would
shift their window).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F


def cache_layers(cache: Any) -> list[Any]:
    """The cache's layers, checked to be plain dynamic (full-attention) layers."""
    from transformers.cache_utils import DynamicLayer

    layers = list(cache.layers)
    for layer in layers:
        if type(layer) is not DynamicLayer:
            raise NotImplementedError(f"embedded engine supports only DynamicLayer, got {layer}")
    return layers


def _pad_left(t: torch.Tensor, n: int) -> torch.Tensor:
    """Pad dim -2 (sequence) of a [B, H, S, D] tensor with n zeros on the left."""
    return F.pad(t, (0, 0, n, 0)) if n else t


class KVBatch:
    """Batched decode state: one DynamicCache, a 2-D attention mask and per-row lengths."""

    def __init__(self) -> None:
        self.cache: Any | None = None
        self.mask: torch.Tensor | None = None
        self.lengths: torch.Tensor | None = None

    @property
    def size(self) -> int:
        return 0 if self.mask is None else int(self.mask.shape[0])

    @property
    def width(self) -> int:
        return 0 if self.mask is None else int(self.mask.shape[1])

    def add(self, cache: Any, length: int) -> None:
        """Append one prefilled sequence (its cache holds exactly `length` positions)."""
        device = cache_layers(cache)[0].keys.device
        row_mask = torch.ones(1, length, dtype=torch.long, device=device)
        row_len = torch.tensor([length], dtype=torch.long, device=device)
        if self.cache is None:
            self.cache, self.mask, self.lengths = cache, row_mask, row_len
            return
        width = max(self.width, length)
        grow, pad_new = width - self.width, width - length
        for old, new in zip(cache_layers(self.cache), cache_layers(cache), strict=True):
            old.keys = torch.cat([_pad_left(old.keys, grow), _pad_left(new.keys, pad_new)])
            old.values = torch.cat([_pad_left(old.values, grow), _pad_left(new.values, pad_new)])
        self.mask = torch.cat([F.pad(self.mask, (grow, 0)), F.pad(row_mask, (pad_new, 0))])
        self.lengths = torch.cat([self.lengths, row_len])

    def row(self, i: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Row i's real positions, per layer (keys, values) of shape [1, kv_heads, n, head_dim],
        copied (a view would keep the whole batch's tensors alive)."""
        start = self.width - int(self.lengths[i].item())
        return [
            (layer.keys[i : i + 1, :, start:].clone(), layer.values[i : i + 1, :, start:].clone())
            for layer in cache_layers(self.cache)
        ]

    def step_inputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Attention mask (one new real column) and position ids for a one-token decode step."""
        mask = F.pad(self.mask, (0, 1), value=1)
        return mask, self.lengths.unsqueeze(1)

    def commit_step(self, mask: torch.Tensor) -> None:
        """After the forward pass: the new token is cached in every row."""
        self.mask = mask
        self.lengths = self.lengths + 1

    def keep(self, rows: list[int]) -> None:
        """Keep only `rows` (in this order); trim columns that are now padding everywhere."""
        if len(rows) == self.size:
            return
        if not rows:
            self.cache = self.mask = self.lengths = None
            return
        index = torch.tensor(rows, dtype=torch.long, device=self.mask.device)
        self.mask, self.lengths = self.mask[index], self.lengths[index]
        trim = self.width - int(self.lengths.max().item())
        self.mask = self.mask[:, trim:]
        for layer in cache_layers(self.cache):
            layer.keys = layer.keys[index, :, trim:]
            layer.values = layer.values[index, :, trim:]
