"""The engine's two KV-cache backends behind one small interface (rows = the running batch).

- `DynamicKV`: transformers' own forward with a `DynamicCache` per prompt, joined into one
  left-padded batch (`kvbatch.py`). Any HF causal LM without sliding windows; eager, so on a GPU
  each decode step costs hundreds of kernel launches from Python.
- `StaticKV`: slots of a preallocated cache (`static.py`), prompts prefilled together, decode
  steps replayed as CUDA graphs on CUDA (`graphs.py`). Dense Llama-family models only.

Both keep rows in the order the engine's running list has: `prefill` appends rows, `decode`
returns one logits row per running row, `keep` drops rows (and reorders).
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Literal, Protocol

import torch

from inference.engine.graphs import StaticDecoder
from inference.engine.kvbatch import KVBatch
from inference.engine.static import StaticCache, bytes_per_token, unsupported_reason

log = logging.getLogger(__name__)

KVMode = Literal["auto", "dynamic", "static"]


class KVBackend(Protocol):
    max_len: int
    """Most tokens (prompt + generated) one sequence may hold."""

    def prefill(self, prompts: list[list[int]]) -> torch.Tensor:
        """Append one row per prompt; float32 logits [n, vocab] of each prompt's last token."""
        ...

    def decode(self, last_tokens: list[int]) -> torch.Tensor:
        """Feed each row its last token; float32 logits [rows, vocab]."""
        ...

    def keep(self, rows: list[int]) -> None: ...

    def reset(self) -> None: ...


class DynamicKV:
    def __init__(self, model: Any, max_len: int) -> None:
        self.model = model
        self.max_len = max_len
        self.device = next(model.parameters()).device
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._batch = KVBatch()

    def prefill(self, prompts: list[list[int]]) -> torch.Tensor:
        from transformers import DynamicCache

        logits = []
        for prompt in prompts:
            cache = DynamicCache(config=self.model.config)
            ids = torch.tensor([prompt], dtype=torch.long, device=self.device)
            out = self.model(
                input_ids=ids, use_cache=True, logits_to_keep=1, **{self._cache_kw: cache}
            )
            self._batch.add(cache, len(prompt))
            logits.append(out.logits[:, -1].float())
        return torch.cat(logits)

    def decode(self, last_tokens: list[int]) -> torch.Tensor:
        mask, positions = self._batch.step_inputs()
        ids = torch.tensor([[t] for t in last_tokens], dtype=torch.long, device=self.device)
        out = self.model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=positions,
            use_cache=True,
            **{self._cache_kw: self._batch.cache},
        )
        self._batch.commit_step(mask)
        return out.logits[:, -1].float()

    def keep(self, rows: list[int]) -> None:
        self._batch.keep(rows)

    def reset(self) -> None:
        self._batch = KVBatch()


class StaticKV:
    def __init__(
        self,
        model: Any,
        slots: int,
        capacity: int,
        *,
        use_graphs: bool = True,
        prefill_tokens: int = 16384,
    ) -> None:
        self.cache = StaticCache(model, slots, capacity)
        self.decoder = StaticDecoder(self.cache, use_graphs)
        self.max_len = capacity
        self.prefill_tokens = prefill_tokens
        self._free = list(range(slots))
        self._slots: list[int] = []  # slot of each row
        self._lengths: list[int] = []  # tokens cached in each row

    def prefill(self, prompts: list[list[int]]) -> torch.Tensor:
        logits, start = [], 0
        while start < len(prompts):
            end = self._chunk_end(prompts, start)
            chunk = prompts[start:end]
            slots = [self._take_slot() for _ in chunk]
            logits.append(self.cache.prefill(chunk, slots))
            self._slots += slots
            self._lengths += [len(p) for p in chunk]
            start = end
        return torch.cat(logits)

    def _chunk_end(self, prompts: list[list[int]], start: int) -> int:
        """Prompts [start, end) padded to their longest stay within `prefill_tokens`."""
        end, width = start + 1, len(prompts[start])
        while end < len(prompts):
            width = max(width, len(prompts[end]))
            if width * (end + 1 - start) > self.prefill_tokens:
                break
            end += 1
        return end

    def _take_slot(self) -> int:
        self._free.sort()
        return self._free.pop(0)

    def decode(self, last_tokens: list[int]) -> torch.Tensor:
        logits = self.decoder.step(self._slots, last_tokens, self._lengths)
        self._lengths = [n + 1 for n in self._lengths]
        return logits

    def keep(self, rows: list[int]) -> None:
        kept = set(rows)
        self._free += [s for i, s in enumerate(self._slots) if i not in kept]
        self._slots = [self._slots[i] for i in rows]
        self._lengths = [self._lengths[i] for i in rows]

    def usage(self) -> float:
        """Fraction of the cache's token slots holding cached tokens (vLLM's KV usage)."""
        return sum(self._lengths) / (self.cache.slots * self.cache.capacity)

    def reset(self) -> None:
        self._free = list(range(self.cache.slots))
        self._slots, self._lengths = [], []


def auto_capacity(model: Any, slots: int, max_model_len: int, memory_fraction: float) -> int:
    """Tokens per slot: `max_model_len`, or less so the cache fits `memory_fraction` of the
    device's free memory (CUDA); a multiple of 256, at least 256."""
    capacity = max_model_len
    device = next(model.parameters()).device
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        fit = int(free * memory_fraction) // (slots * bytes_per_token(model))
        capacity = min(capacity, fit)
    return max(256, capacity // 256 * 256) if capacity >= 256 else capacity


def make_backend(
    model: Any,
    *,
    mode: KVMode,
    max_batch_size: int,
    max_model_len: int,
    kv_capacity: int = 0,
    cuda_graphs: bool = True,
    memory_fraction: float = 0.5,
) -> KVBackend:
    """`auto`: static on CUDA when the model is supported, else dynamic."""
    device = next(model.parameters()).device
    reason = unsupported_reason(model)
    if mode == "static" and reason:
        raise ValueError(f"static KV cache not supported: {reason}")
    if mode == "dynamic" or (mode == "auto" and (reason or device.type != "cuda")):
        return DynamicKV(model, max_model_len)
    capacity = kv_capacity or auto_capacity(model, max_batch_size, max_model_len, memory_fraction)
    capacity = min(capacity, max_model_len)
    log.info(
        "static KV cache: %d slots x %d tokens, cuda graphs %s",
        max_batch_size,
        capacity,
        cuda_graphs,
    )
    return StaticKV(model, max_batch_size, capacity, use_graphs=cuda_graphs)
