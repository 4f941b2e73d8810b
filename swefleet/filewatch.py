"""Wait until a path exists: how the orchestrator and the trainer wake up for each other's files.

The hand-off files (batches `step_NNNNNN.npz`, weights `vNNNNNN/`) are written under a temporary
name and renamed into place; the files stay the source of truth. What this module decides is
only *when to look*: an inotify watch on the path's directory wakes the waiter at the rename
itself (within a fraction of a millisecond), and every wake-up re-checks `path.exists()`.

A slow backstop re-check every `backstop_s` covers what inotify does not see: files written by
another node of a shared filesystem (NFS reports only this node's own changes), a missed event,
a watch that could not be added (inotify limits). Without inotify (not Linux) the backstop is
the only wake-up. While the directory does not exist yet, its nearest existing ancestor is
watched instead and the watch moves down as directories appear.

    with FileWatch(backstop_s=2.0) as watch:
        watch.wait(path, timeout_s=60, stop=stop_event)   # blocking (a thread, the trainer)
        await watch.wait_async(path, timeout_s=1.0)       # asyncio (the orchestrator)

One waiter per `FileWatch` at a time. Waits return True once `path` exists, False on timeout
or stop. The blocking wait checks `stop` on every wake-up: a thread that sets `stop` calls
`wake()` too; a signal handler need not, because signals wake a wait in the main thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Self

log = logging.getLogger(__name__)

_CREATE, _MOVED_TO, _IGNORED = 0x100, 0x80, 0x8000  # IN_CREATE, IN_MOVED_TO, IN_IGNORED
_DELETE_SELF, _MOVE_SELF = 0x400, 0x800
_MASK = _CREATE | _MOVED_TO | _DELETE_SELF | _MOVE_SELF


def _open_inotify():
    """An inotify instance, or None where the platform has none (then the backstop alone)."""
    try:
        from inotify_simple import INotify

        return INotify(nonblocking=True)
    except (ImportError, AttributeError, OSError) as e:  # not Linux / no libc inotify
        log.warning("no inotify (%s): hand-off files are found by the backstop re-check only", e)
        return None


class FileWatch:
    """Wake up when a path appears (inotify on its directory), with a slow backstop re-check."""

    def __init__(self, backstop_s: float = 2.0) -> None:
        if backstop_s <= 0:
            raise ValueError(f"backstop_s must be > 0, got {backstop_s}")
        self.backstop_s = backstop_s
        self.wakes: Counter[str] = Counter()
        """Wake-ups by cause: `event` (inotify), `backstop` (re-check timer), `wake` (wake(),
        a signal)."""
        self.found_by: str | None = None
        """How the last successful wait found its path: `present` (already there), or the cause
        of the wake-up that saw it (`event`, `backstop`, `wake`)."""
        self._ino = _open_inotify()
        self._wd: int | None = None
        self._watched: Path | None = None
        self._wake_r, self._wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)

    # ---------------------------------------------------------------- waits
    def wait(self, path: Path, timeout_s: float | None = None,
             stop: threading.Event | None = None) -> bool:
        """Block until `path` exists (True), or `timeout_s` passes or `stop` is set (False)."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        poller = select.poll()  # not select(): no limit on the fd numbers
        for fd in [self._wake_r] + ([self._ino.fd] if self._ino else []):
            poller.register(fd, select.POLLIN)
        cause = "present"
        with self._signals_wake():
            while True:
                if self._found(path, cause):
                    return True
                tick = self._tick(deadline)
                if (stop is not None and stop.is_set()) or tick is None:
                    return False
                ready = [fd for fd, _ in poller.poll(tick * 1000)]
                cause = self._note_wake(ready)

    async def wait_async(self, path: Path, timeout_s: float | None = None) -> bool:
        """Like `wait`, without blocking the event loop (the inotify fd is a loop reader);
        cancel the task to stop."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        fds = [self._wake_r] + ([self._ino.fd] if self._ino else [])
        cause = "present"
        while True:
            if self._found(path, cause):
                return True
            tick = self._tick(deadline)
            if tick is None:
                return False
            ready = loop.create_future()
            for fd in fds:
                loop.add_reader(fd, _mark_ready, ready, fd)
            try:
                async with asyncio.timeout(tick):
                    await ready
            except TimeoutError:
                pass
            finally:
                for fd in fds:
                    loop.remove_reader(fd)
            woke = ready.done() and not ready.cancelled()  # cancelled: the tick timed out
            cause = self._note_wake([ready.result()] if woke else [])

    def wake(self) -> None:
        """Make a wait in progress re-check now (thread-safe; e.g. after setting its `stop`)."""
        with contextlib.suppress(BlockingIOError):
            os.write(self._wake_w, b"\0")

    # ---------------------------------------------------------------- internals
    def _found(self, path: Path, cause: str) -> bool:
        self._watch_dir_of(path)  # watch first, then look: a rename in between still wakes us
        if path.exists():
            self.found_by = cause
            return True
        return False

    def _tick(self, deadline: float | None) -> float | None:
        """Seconds to sleep until the next backstop re-check; None once the deadline passed."""
        if deadline is None:
            return self.backstop_s
        left = deadline - time.monotonic()
        return None if left <= 0 else min(left, self.backstop_s)

    def _note_wake(self, ready: list[int]) -> str:
        """Drain what woke us; returns the cause."""
        cause = "backstop"
        if self._wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                while os.read(self._wake_r, 4096):
                    pass
            cause = "wake"
        if self._ino is not None and self._ino.fd in ready:
            events = self._ino.read(timeout=0)
            if any(e.mask & _IGNORED for e in events):  # the watched directory went away
                self._wd, self._watched = None, None
            cause = "event" if cause == "backstop" else cause
        self.wakes[cause] += 1
        return cause

    def _watch_dir_of(self, path: Path) -> None:
        """Point the watch at `path`'s directory, or its nearest existing ancestor."""
        if self._ino is None:
            return
        target = path.parent
        while not target.is_dir() and target != target.parent:
            target = target.parent
        if target == self._watched:
            return
        if self._wd is not None:
            with contextlib.suppress(OSError):  # already gone with its directory
                self._ino.rm_watch(self._wd)
        self._wd, self._watched = None, None
        try:
            self._wd, self._watched = self._ino.add_watch(target, _MASK), target
        except OSError as e:  # removed meanwhile, or the inotify watch limit: the backstop
            log.warning("cannot watch %s (%s): backstop re-check every %gs", target, e,
                        self.backstop_s)

    @contextlib.contextmanager
    def _signals_wake(self):
        """In the main thread, let signals wake the wait (their handler may set `stop`)."""
        if threading.current_thread() is not threading.main_thread():
            yield
            return
        previous = signal.set_wakeup_fd(self._wake_w, warn_on_full_buffer=False)
        if previous != -1:  # someone else's (an event loop's): leave it theirs
            signal.set_wakeup_fd(previous)
            yield
            return
        try:
            yield
        finally:
            signal.set_wakeup_fd(-1)

    def close(self) -> None:
        if self._ino is not None:
            self._ino.close()
            self._ino = None
        if self._wake_r != -1:
            os.close(self._wake_r)
            os.close(self._wake_w)
            self._wake_r = self._wake_w = -1

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _mark_ready(fut: asyncio.Future, fd: int) -> None:
    if not fut.done():
        fut.set_result(fd)
