"""Warm pool: pre-started sandboxes per (image, limits, workdir), refilled in the background."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from swefleet.envs.config import SandboxLimits

if TYPE_CHECKING:
    from swefleet.envs.sandbox import DockerSandbox

log = logging.getLogger(__name__)

PoolKey = tuple[str, SandboxLimits, str]
"""(image, limits, workdir): sandboxes are interchangeable only when all three match."""


class WarmPool:
    """Keeps up to `size` idle sandboxes per key; `take` hands the oldest fresh one out."""

    def __init__(
        self,
        size: int,
        ttl_s: float,
        make: Callable[[PoolKey], Awaitable[DockerSandbox]],
        discard: Callable[[DockerSandbox], Awaitable[None]],
    ) -> None:
        self.size = size
        self.ttl_s = ttl_s
        self._make = make
        self._discard = discard
        self._idle: dict[PoolKey, deque[DockerSandbox]] = {}
        self._fillers: dict[PoolKey, asyncio.Task[None]] = {}
        self._closed = False
        self.fill_errors = 0

    def idle(self, key: PoolKey | None = None) -> int:
        if key is not None:
            return len(self._idle.get(key, ()))
        return sum(len(q) for q in self._idle.values())

    def take(self, key: PoolKey) -> DockerSandbox | None:
        """A ready sandbox for `key`, or None; starts a refill either way."""
        self.expire()
        queue = self._idle.get(key)
        found = None
        while queue and found is None:
            sb = queue.popleft()
            if sb.session.looks_alive():
                found = sb
            else:
                self._drop(sb)
        self.refill(key)
        return found

    def refill(self, key: PoolKey) -> None:
        if self.size <= 0 or self._closed:
            return
        task = self._fillers.get(key)
        if task is None or task.done():
            self._fillers[key] = asyncio.ensure_future(self._fill(key))

    async def _fill(self, key: PoolKey) -> None:
        queue = self._idle.setdefault(key, deque())
        while not self._closed and len(queue) < self.size:
            try:
                sb = await self._make(key)
            except Exception as e:  # noqa: BLE001 - a cold acquire still works; retried on next take
                self.fill_errors += 1
                log.warning("warm pool for %s: %s: %s", key[0], type(e).__name__, e)
                return
            if self._closed:
                await self._discard(sb)
                return
            queue.append(sb)

    def expire(self) -> None:
        """Drop sandboxes idle longer than the TTL (and refill their keys)."""
        now = time.monotonic()
        for key, queue in self._idle.items():
            stale = [sb for sb in queue if now - sb.created > self.ttl_s]
            for sb in stale:
                queue.remove(sb)
                self._drop(sb)
            if stale:
                self.refill(key)

    def _drop(self, sb: DockerSandbox) -> None:
        task = asyncio.ensure_future(self._discard(sb))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def close(self) -> None:
        """Stop refilling and remove every idle sandbox."""
        self._closed = True
        fillers = list(self._fillers.values())
        for task in fillers:
            task.cancel()
        await asyncio.gather(*fillers, return_exceptions=True)
        idle = [sb for queue in self._idle.values() for sb in queue]
        self._idle.clear()
        await asyncio.gather(*(self._discard(sb) for sb in idle), return_exceptions=True)
