"""Prefix reuse across requests: which cached K/V holds which tokens, for both KV backends.

Static cache (`PrefixSlots`): which slot holds which tokens.

Multi-turn agent episodes resend the whole conversation every turn. A static-cache slot that a
finished sequence releases still holds the K/V of every token it fed (prompt + generated tokens
but the last); `PrefixSlots` remembers those token ids per free slot. A new prompt takes the free
slot whose remembered tokens share the longest prefix with it (ties: the least recently
released), keeps that prefix's K/V and prefills only the rest (at least its last token, whose
logits sample the first output token). A prompt with no hit takes a never-used slot first, then
the least recently released one (its remembered tokens are dropped: the eviction).

Exact: a hit reuses K/V computed for the very same tokens at the very same positions by the
same weights. A weight update (`invalidate`) forgets every free slot's tokens and marks the
slots in use so that theirs are dropped when released (their K/V mixes two policy versions).

Dynamic cache (`PrefixStore`): a finished sequence's K/V is copied out of the batch and parked
under its token ids (prompt + generated tokens but the last), with an optional per-token payload
(the routed experts of MoE models, one row per cached token). A new prompt starts from the
entry sharing its longest prefix (ties: the most recently used); entries stay parked after a hit
(the prompts of one GRPO group all reuse one entry). Parking an entry drops those whose tokens
are a prefix of its own (a hit on them is a hit on it); the parked bytes are bounded, least
recently used entries evicted first. A weight update drops every entry, and sequences prefilled
before it never park (same epoch rule as the slots).

Both share the hit rule (`reusable`): the shared prefix, minus the prompt's last token when the
whole prompt is cached (its logits sample the first output token, so it is always prefilled).

Counters follow vLLM's `vllm:prefix_cache_queries` / `vllm:prefix_cache_hits`: tokens of the
prompts looked up, tokens served from the cache. Granularity is one token (vLLM: one block).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any


def common_prefix(a: list[int], b: list[int]) -> int:
    """Length of the longest common prefix (list slices compare in C; binary search)."""
    n = min(len(a), len(b))
    if n == 0 or a[0] != b[0]:
        return 0
    if a[:n] == b[:n]:
        return n
    lo, hi = 1, n  # a[:lo] == b[:lo], a[:hi] != b[:hi]
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid
    return lo


def reusable(cached: list[int], prompt: list[int]) -> int:
    """How many of `prompt`'s first tokens may come from K/V cached for `cached` tokens: their
    common prefix, but never the prompt's last token (it is fed to get the first logits)."""
    return min(common_prefix(cached, prompt), len(prompt) - 1)


class PrefixSlots:
    """Slot allocation for `StaticKV` with remembered token ids per slot."""

    def __init__(self, slots: int, capacity: int, enabled: bool = True) -> None:
        self.slots = slots
        self.capacity = capacity
        self.enabled = enabled
        self.tokens: list[list[int]] = [[] for _ in range(slots)]
        """Per slot: the token ids whose K/V it holds at positions 0..n-1."""
        self.free: set[int] = set(range(slots))
        self._epoch = 0
        self._slot_epoch = [0] * slots
        self._released = [0] * slots  # clock tick of the last release
        self._clock = itertools.count()

    def take(self, prompt: list[int]) -> tuple[int, int]:
        """A free slot for `prompt` and how many of its first tokens are already cached there."""
        if not self.free:
            raise RuntimeError("no free KV slot")
        best, best_key = min(self.free), None
        for slot in self.free if self.enabled else ():
            tokens = self.tokens[slot]
            if not tokens:  # empty: lowest index first (keeps decode batch buckets small)
                key = (0, 1, -slot)
            else:  # ties: least recently released first
                hit = reusable(tokens, prompt)
                key = (hit, 0, -self._released[slot])
            if best_key is None or key > best_key:
                best, best_key = slot, key
        hit = best_key[0] if best_key else 0
        self.free.remove(best)
        record = self.tokens[best]
        del record[hit:]
        record += prompt[hit:]
        self._slot_epoch[best] = self._epoch
        return best, hit

    def append(self, slots: list[int], tokens: list[int]) -> None:
        """Each slot's K/V now also holds its token (a decode step fed it)."""
        for slot, token in zip(slots, tokens, strict=True):
            self.tokens[slot].append(token)

    def release(self, slot: int) -> None:
        """The slot's sequence left; keep its tokens for reuse unless they are stale."""
        if not self.enabled or self._slot_epoch[slot] != self._epoch:
            self.tokens[slot] = []
        else:
            del self.tokens[slot][self.capacity - 1 :]  # a free slot always has room to park
        self._released[slot] = next(self._clock)
        self.free.add(slot)

    def park(self, slot: int) -> int:
        """A position where a decode step may write garbage into a free slot without touching
        its remembered tokens (padding rows of a batch bucket)."""
        return len(self.tokens[slot]) if slot in self.free else 0

    def invalidate(self) -> None:
        """New weights: no cached K/V may be reused."""
        self._epoch += 1
        for slot in self.free:
            self.tokens[slot] = []

    def reset(self) -> None:
        """Every slot free and empty (engine shutdown or crash)."""
        self.tokens = [[] for _ in range(self.slots)]
        self.free = set(range(self.slots))
        self._epoch += 1


@dataclass
class Parked:
    """A parked entry: its token ids, the K/V value (opaque here), optional per-token payload."""

    tokens: list[int]
    value: Any
    nbytes: int
    extra: Any = None
    """Sliceable along axis 0, one row per token (MoE routed experts), or None."""


class PrefixStore:
    """Parked K/V of finished sequences keyed by token ids, LRU-bounded in bytes (`DynamicKV`)."""

    def __init__(self, max_bytes: int, enabled: bool = True) -> None:
        self.max_bytes = max_bytes
        self.enabled = enabled and max_bytes > 0
        self.epoch = 0
        """Bumped by `invalidate`: a sequence prefilled under an older epoch never parks."""
        self.bytes = 0
        self.evictions = 0
        self._entries: OrderedDict[int, Parked] = OrderedDict()  # least recently used first
        self._keys = itertools.count()

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, prompt: list[int]) -> tuple[int, Parked | None]:
        """(tokens reusable, entry) for the entry sharing `prompt`'s longest prefix; (0, None)
        without a hit. The entry becomes the most recently used."""
        best, best_hit = None, 0
        for key, entry in reversed(self._entries.items()):  # most recent first wins ties
            hit = reusable(entry.tokens, prompt)
            if hit > best_hit:
                best, best_hit = key, hit
        if best is None:
            return 0, None
        self._entries.move_to_end(best)
        return best_hit, self._entries[best]

    def park(self, entry: Parked, epoch: int) -> bool:
        """Keep `entry` (computed under `epoch`) unless it is stale, too big, or already covered
        by a parked entry whose tokens start with its own. Returns whether it was kept."""
        n = len(entry.tokens)
        if not self.enabled or epoch != self.epoch or not n or entry.nbytes > self.max_bytes:
            return False
        covered = []
        for key, old in self._entries.items():
            m = len(old.tokens)
            if m >= n and old.tokens[:n] == entry.tokens:
                return False
            if m < n and entry.tokens[:m] == old.tokens:
                covered.append(key)
        for key in covered:
            self._drop(key)
        self._entries[next(self._keys)] = entry
        self.bytes += entry.nbytes
        while self.bytes > self.max_bytes:
            self._drop(next(iter(self._entries)))
            self.evictions += 1
        return True

    def _drop(self, key: int) -> None:
        self.bytes -= self._entries.pop(key).nbytes

    def invalidate(self) -> None:
        """New weights: drop everything; sequences prefilled before now will not park."""
        self.epoch += 1
        self._entries.clear()
        self.bytes = 0

    reset = invalidate
