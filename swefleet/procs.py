"""Child processes that never outlive their parent (a `kill -9` of the orchestrator must not
leave an inference server or a trainer running), and stopping the ones still running when a
command is interrupted."""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """`preexec_fn` for `subprocess.Popen`: the kernel sends `sig` to the child when the
    thread that started it exits (Linux; a no-op elsewhere). Start children from the main thread.
    A process may also call it on itself, early (a parent already gone is not noticed)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)



def live_descendants(pid: int | None = None) -> list[int]:
    """The processes under `pid` (default: this process), children first, that still run (not
    zombies)."""
    parents: dict[str, list[int]] = {}
    for entry in Path("/proc").iterdir() if Path("/proc/self").exists() else ():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:  # gone
            continue
        if len(fields) > 1 and fields[0] not in ("Z", "X"):
            parents.setdefault(fields[1], []).append(int(entry.name))
    found, todo = [], [os.getpid() if pid is None else pid]
    while todo:
        children = parents.get(str(todo.pop(0)), [])
        found += children
        todo += children
    return found


def stop_descendants(grace_s: float = 3.0, settle_s: float = 0.0) -> int:
    """SIGTERM every process under this one (a whole process group where one leads its own),
    SIGKILL those still running after `grace_s`; processes started meanwhile are stopped too.
    Those that end by themselves within `settle_s` (already stopping) are left alone. Returns
    how many processes were stopped."""
    settled = time.monotonic() + settle_s
    while live_descendants() and time.monotonic() < settled:
        time.sleep(0.05)
    stopped: set[int] = set()
    deadline = time.monotonic() + grace_s
    while procs := live_descendants():
        late = time.monotonic() >= deadline
        for pid in procs:
            if pid not in stopped or late:
                _signal(pid, signal.SIGKILL if late else signal.SIGTERM)
                stopped.add(pid)
        if late:
            break
        time.sleep(0.05)
    return len(stopped)  # (reaped by whoever started them, or gone with this process)


def _signal(pid: int, sig: int) -> None:
    try:
        if os.getpgid(pid) == pid:  # leads its own group (start_new_session): its helpers too
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
