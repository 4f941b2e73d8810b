"""Child processes that never outlive their parent (a `kill -9` of the orchestrator must not
leave an inference server or a trainer running)."""

from __future__ import annotations

import ctypes
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """`preexec_fn` for `subprocess.Popen`: the kernel sends `sig` to the child when the
    thread that started it exits (Linux; a no-op elsewhere). Start children from the main thread.
    A process may also call it on itself, early (a parent already gone is not noticed)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
