"""How much of the wall time a server spent with nothing to do (no request in flight).

The fleet client calls `started()` / `finished()` around each request it sends to a server; the
metrics sink calls `take()` once per step and gets the idle fraction of the window since the last
call. A server is idle while no request of ours is in flight on it: "inference waited", which the
async loop exists to prevent (the trainer-side counterpart is `trainer/idle_fraction`).
"""

from __future__ import annotations

import time
from collections.abc import Callable


class IdleClock:
    """Idle time of one server, accumulated between `take()` calls."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._in_flight = 0
        self._window_start = clock()
        self._idle_since: float | None = self._window_start
        self._idle_s = 0.0

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def started(self) -> None:
        """A request was sent to the server."""
        if self._in_flight == 0 and self._idle_since is not None:
            self._idle_s += self._clock() - self._idle_since
            self._idle_since = None
        self._in_flight += 1

    def finished(self) -> None:
        """A request ended (answered, failed or cancelled)."""
        if self._in_flight <= 0:
            raise RuntimeError("IdleClock.finished() without a matching started()")
        self._in_flight -= 1
        if self._in_flight == 0:
            self._idle_since = self._clock()

    def take(self) -> float:
        """Idle fraction of the window since the previous `take()` (or creation); starts a new one."""
        now = self._clock()
        idle = self._idle_s
        if self._idle_since is not None:
            idle += now - self._idle_since
            self._idle_since = now
        window = now - self._window_start
        self._window_start = now
        self._idle_s = 0.0
        return idle / window if window > 0 else 0.0
