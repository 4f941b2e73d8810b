"""The engine's two KV-cache backends behind one small interface (rows = the running batch).

- `DynamicKV`: transformers' own forward with a `DynamicCache` per prompt, joined into one
  left-padded batch (`kvbatch.py`). Any HF causal LM without sliding windows; eager, so on a GPU
  each decode step costs hundreds of kernel launches from Python.
- `StaticKV`: slots of a preallocated cache (`static.py`), prompts prefilled together, decode
  steps replayed as CUDA graphs on CUDA (`graphs.py`). Dense Llama-family models only.

Both keep rows in the order the engine's running list has: `prefill` appends rows (and says how
many prompt tokens each found cached: `StaticKV` reuses a free slot's K/V of an earlier request
sharing the prompt's prefix, `DynamicKV` starts from a parked finished sequence's K/V, both via
`prefix.py`), `decode` samples one token per running row, `keep` drops rows (and reorders;
`DynamicKV` parks the dropped rows' K/V, with the engine's per-token payload, the routed experts
of MoE models), `invalidate` forgets reusable K/V (new weights).
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Literal, Protocol

import torch
from swefleet.inference.engine.graphs import StaticDecoder
from swefleet.inference.engine.kvbatch import KVBatch
from swefleet.inference.engine.prefix import Parked, PrefixSlots, PrefixStore
from swefleet.inference.engine.sampling import RowParams, Sampled, sample
from swefleet.inference.engine.static import StaticCache, bytes_per_token, unsupported_reason

log = logging.getLogger(__name__)

KVMode = Literal["auto", "dynamic", "static"]


class KVBackend(Protocol):
    max_len: int
    """Most tokens (prompt + generated) one sequence may hold."""

    def prefill(self, prompts: list[list[int]]) -> tuple[torch.Tensor, list[int], list[Any]]:
        """Append one row per prompt; float32 logits [n, vocab] of each prompt's last token,
        per prompt how many of its tokens were served from the prefix cache, and per prompt the
        payload parked with those tokens (rows [0, cached); None when none was)."""
        ...

    def decode(self, last_tokens: list[int], rows: list[RowParams]) -> Sampled:
        """Feed each row its last token; the next token sampled per row with `rows[i]`."""
        ...

    def keep(self, rows: list[int], payloads: dict[int, Any] | None = None) -> None:
        """Keep only `rows` (in this order). `payloads`: per dropped row, data to park with its
        K/V (one row per cached token) and return with a later hit."""
        ...

    def invalidate(self) -> None:
        """The weights changed: no K/V computed before may be reused by a later request."""
        ...

    def reset(self) -> None: ...


class DynamicKV:
    def __init__(
        self, model: Any, max_len: int, *, prefix_cache: bool = True, prefix_bytes: int = 1 << 30
    ) -> None:
        self.model = model
        self.max_len = max_len
        self.device = next(model.parameters()).device
        params = inspect.signature(model.forward).parameters
        self._cache_kw = "cache" if "cache" in params else "past_key_values"
        self._batch = KVBatch()
        self.prefix = PrefixStore(prefix_bytes, prefix_cache)
        self._tokens: list[list[int]] = []  # per row: the token ids its K/V holds
        self._epochs: list[int] = []  # per row: the prefix store's epoch at its prefill

    def prefill(self, prompts: list[list[int]]) -> tuple[torch.Tensor, list[int], list[Any]]:
        logits, hits, extras = [], [], []
        for prompt in prompts:
            hit, entry = self.prefix.lookup(prompt)
            cache = self._start_cache(entry, hit)
            ids = torch.tensor([prompt[hit:]], dtype=torch.long, device=self.device)
            out = self.model(
                input_ids=ids, use_cache=True, logits_to_keep=1, **{self._cache_kw: cache}
            )
            self._batch.add(cache, len(prompt))
            self._tokens.append(list(prompt))
            self._epochs.append(self.prefix.epoch)
            logits.append(out.logits[:, -1].float())
            hits.append(hit)
            extras.append(None if entry is None or entry.extra is None else entry.extra[:hit])
        return torch.cat(logits), hits, extras

    def _start_cache(self, entry: Parked | None, hit: int) -> Any:
        """A fresh DynamicCache, holding `entry`'s K/V of its first `hit` tokens if any."""
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        if entry is not None:
            for i, (k, v) in enumerate(entry.value):
                cache.update(k[:, :, :hit], v[:, :, :hit], i)
        return cache

    def decode(self, last_tokens: list[int], rows: list[RowParams]) -> Sampled:
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
        for tokens, token in zip(self._tokens, last_tokens, strict=True):
            tokens.append(token)
        return sample(out.logits[:, -1].float(), rows)

    def keep(self, rows: list[int], payloads: dict[int, Any] | None = None) -> None:
        if len(rows) == len(self._tokens):
            return  # nobody left (as KVBatch.keep)
        kept = set(rows)
        for i in range(len(self._tokens)) if self.prefix.enabled else ():
            if i not in kept and self._epochs[i] == self.prefix.epoch:
                self._park(i, (payloads or {}).get(i))
        self._batch.keep(rows)
        self._tokens = [self._tokens[i] for i in rows]
        self._epochs = [self._epochs[i] for i in rows]

    def _park(self, row: int, extra: Any) -> None:
        layers = self._batch.row(row)
        nbytes = sum(k.nbytes + v.nbytes for k, v in layers)
        self.prefix.park(Parked(self._tokens[row], layers, nbytes, extra), self._epochs[row])

    def invalidate(self) -> None:
        self.prefix.invalidate()

    def reset(self) -> None:
        self._batch = KVBatch()
        self.prefix.reset()
        self._tokens, self._epochs = [], []


class StaticKV:
    def __init__(
        self,
        model: Any,
        slots: int,
        capacity: int,
        *,
        use_graphs: bool = True,
        prefill_tokens: int = 16384,
        prefix_cache: bool = True,
    ) -> None:
        self.cache = StaticCache(model, slots, capacity)
        self.decoder = StaticDecoder(self.cache, use_graphs)
        self.max_len = capacity
        self.prefill_tokens = prefill_tokens
        self.prefix = PrefixSlots(slots, capacity, prefix_cache)
        self._slots: list[int] = []  # slot of each row
        self._lengths: list[int] = []  # tokens cached in each row

    def prefill(self, prompts: list[list[int]]) -> tuple[torch.Tensor, list[int]]:
        taken = [self.prefix.take(p) for p in prompts]
        slots, hits = [t[0] for t in taken], [t[1] for t in taken]
        rest = [p[h:] for p, h in zip(prompts, hits, strict=True)]
        logits, start = [], 0
        while start < len(rest):
            end = self._chunk_end(rest, start)
            logits.append(self.cache.prefill(rest[start:end], slots[start:end], hits[start:end]))
            start = end
        self._slots += slots
        self._lengths += [len(p) for p in prompts]
        return torch.cat(logits), hits, [None] * len(prompts)

    def _chunk_end(self, prompts: list[list[int]], start: int) -> int:
        """Prompts [start, end) padded to their longest stay within `prefill_tokens`."""
        end, width = start + 1, len(prompts[start])
        while end < len(prompts):
            width = max(width, len(prompts[end]))
            if width * (end + 1 - start) > self.prefill_tokens:
                break
            end += 1
        return end

    def decode(self, last_tokens: list[int], rows: list[RowParams]) -> Sampled:
        park = [self.prefix.park(s) for s in range(self.cache.slots)]
        out = self.decoder.step(self._slots, last_tokens, self._lengths, rows, park)
        self.prefix.append(self._slots, last_tokens)
        self._lengths = [n + 1 for n in self._lengths]
        return out

    def keep(self, rows: list[int], payloads: dict[int, Any] | None = None) -> None:
        kept = set(rows)  # payloads: only dense models run here, nothing to park with K/V
        for i, slot in enumerate(self._slots):
            if i not in kept:
                self.prefix.release(slot)
        self._slots = [self._slots[i] for i in rows]
        self._lengths = [self._lengths[i] for i in rows]

    def invalidate(self) -> None:
        self.prefix.invalidate()
        self.cache.refresh()

    def usage(self) -> float:
        """Fraction of the cache's token slots holding tokens of running sequences (vLLM's KV
        usage; K/V kept only for prefix reuse counts as free, as vLLM's cached free blocks)."""
        return sum(self._lengths) / (self.cache.slots * self.cache.capacity)

    def reset(self) -> None:
        self.prefix.reset()
        self._slots, self._lengths = [], []


def auto_capacity(
    model: Any, slots: int, max_model_len: int, gpu_memory_fraction: float | None
) -> int:
    """Tokens per slot: `max_model_len` exactly when it fits the KV budget (CUDA); otherwise as
    much as fits, rounded down to a multiple of 256 (the engine then reports the smaller
    `max_model_len`). Budget: `gpu_memory_fraction` of the GPU minus what this process already
    holds (the weights), at most the free memory; None: half the free memory."""
    device = next(model.parameters()).device
    if device.type != "cuda":
        return max_model_len
    free, total = torch.cuda.mem_get_info(device)
    if gpu_memory_fraction is None:
        budget = free // 2
    else:
        budget = min(free, int(total * gpu_memory_fraction) - torch.cuda.memory_reserved(device))
    fit = max(budget, 0) // (slots * bytes_per_token(model))
    if fit >= max_model_len:
        return max_model_len
    return fit // 256 * 256 if fit >= 256 else fit


def make_backend(
    model: Any,
    *,
    mode: KVMode,
    max_batch_size: int,
    max_model_len: int,
    kv_capacity: int = 0,
    cuda_graphs: bool = True,
    gpu_memory_fraction: float | None = None,
    prefix_cache: bool = True,
    prefix_cache_bytes: int = 1 << 30,
) -> KVBackend:
    """`auto`: static on CUDA when the model is supported, else dynamic. `prefix_cache_bytes`
    bounds the K/V the dynamic backend keeps parked for reuse (the static one reuses its slots)."""
    device = next(model.parameters()).device
    reason = unsupported_reason(model)
    if mode == "static" and reason:
        raise ValueError(f"static KV cache not supported: {reason}")
    if mode == "dynamic" or (mode == "auto" and (reason or device.type != "cuda")):
        return DynamicKV(
            model, max_model_len, prefix_cache=prefix_cache, prefix_bytes=prefix_cache_bytes
        )
    capacity = kv_capacity or auto_capacity(
        model, max_batch_size, max_model_len, gpu_memory_fraction
    )
    capacity = min(capacity, max_model_len)
    log.info(
        "static KV cache: %d slots x %d tokens, cuda graphs %s",
        max_batch_size,
        capacity,
        cuda_graphs,
    )
    return StaticKV(
        model, max_batch_size, capacity, use_graphs=cuda_graphs, prefix_cache=prefix_cache
    )
