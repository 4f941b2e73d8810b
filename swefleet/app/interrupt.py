"""Ctrl-C and SIGTERM: the one way every `swefleet` command stops on a signal.

    install()                      # first thing, in the main thread
    try:
        return command()
    except KeyboardInterrupt:
        return stopped("eval")     # one line; 130 (SIGINT) or 143 (SIGTERM)

`install` makes SIGTERM (`timeout`, `scancel`, `docker stop`, a plain `kill`) do what Ctrl-C
does, and gives Ctrl-C back to a process that a non-interactive shell started in the background
(it inherits SIGINT ignored). Ctrl-C raises KeyboardInterrupt; inside `asyncio.run` it cancels
the main task instead, so every `finally` and `async with` of the command runs (episodes
cancelled, sandboxes removed, servers and trainer stopped), and `asyncio.run` then raises
KeyboardInterrupt. A second signal raises KeyboardInterrupt at once.

`stopped` runs after the command unwound: it removes what is still left (the containers of
every run this process labelled, on every Docker host the run used; the processes under this
one, SIGTERM then SIGKILL), prints `swefleet <command>: interrupted (SIGTERM)` on stderr (with
what it had to stop, if anything), and returns 128 + the signal's number, as a shell reports a
process the signal ended. A signal after that line ends the process at once.
"""

from __future__ import annotations

import asyncio
import functools
import gc
import logging
import signal
import sys

log = logging.getLogger(__name__)

_received: list[int] = []
"""SIGTERM, once it arrived (a KeyboardInterrupt without it is Ctrl-C's)."""

PROCESS_SETTLE_S = 1.0
"""How long the processes still running under this one at the end may take to end by
themselves (the command's own cleanup is stopping them) before they count as left behind."""
PROCESS_GRACE_S = 2.0
"""How long a process left behind may take to stop on SIGTERM before SIGKILL."""


def install() -> None:
    """SIGTERM as Ctrl-C, and Ctrl-C not ignored (main thread only)."""
    if signal.getsignal(signal.SIGINT) in (signal.SIG_IGN, signal.SIG_DFL, None):
        signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _on_sigterm)


def _on_sigterm(signum: int, frame) -> None:
    """Hand SIGTERM to Ctrl-C's handler: `asyncio.run`'s (cancels its main task) or Python's
    (raises KeyboardInterrupt); any other SIGINT handler (a foreground shell that owns Ctrl-C)
    is bypassed with a KeyboardInterrupt."""
    _received.append(signum)
    handler = signal.getsignal(signal.SIGINT)
    if handler is signal.default_int_handler or _is_asyncio_runners(handler):
        handler(signal.SIGINT, frame)
        return
    raise KeyboardInterrupt


def _is_asyncio_runners(handler) -> bool:
    return (isinstance(handler, functools.partial)
            and isinstance(getattr(handler.func, "__self__", None), asyncio.Runner))


def signal_name() -> str:
    """The signal that stopped the command: SIGTERM once one came, else SIGINT."""
    return signal.Signals(_received[0] if _received else signal.SIGINT).name


def stopped(command: str) -> int:
    """After an interrupted command unwound: remove its leftovers, print one line, return
    128 + the signal's number (130 for SIGINT, 143 for SIGTERM)."""
    sig = signal.Signals[signal_name()]
    logging.getLogger("asyncio").addFilter(_quiet_closed_loop_children)
    try:
        left = remove_leftovers()
        note = f"; stopped what it left running: {left}" if left else ""
    except KeyboardInterrupt:  # a second signal: stop now
        note = "; cleanup cut short (`swefleet clean` removes its containers)"
    print(f"swefleet {command}: interrupted ({sig.name}){note}", file=sys.stderr, flush=True)
    for each in (signal.SIGINT, signal.SIGTERM):  # from now on a signal just ends the process
        signal.signal(each, signal.SIG_DFL)
    gc.freeze()  # the interpreter's last collection would take seconds after torch: skipped
    return 128 + sig


def _quiet_closed_loop_children(record: logging.LogRecord) -> bool:
    """Drop asyncio's "Loop ... that handles pid ... is closed": after the command unwound, a
    child whose loop is gone is one `remove_leftovers` stops and counts in the line."""
    return not str(record.msg).startswith("Loop %r that handles pid")


def remove_leftovers() -> str:
    """Remove the containers of the runs this process labelled (normally gone already) and
    stop the processes under this one; what was left, in words ('' when nothing was)."""
    from swefleet.procs import stop_descendants

    removed = _remove_run_containers()
    stopped = stop_descendants(PROCESS_GRACE_S, settle_s=PROCESS_SETTLE_S)
    parts = []
    if removed:
        parts.append(f"{removed} container{'s' if removed > 1 else ''}")
    if stopped:
        parts.append(f"{stopped} process{'es' if stopped > 1 else ''}")
    return ", ".join(parts)


def _remove_run_containers() -> int:
    if "swefleet.envs.containers" not in sys.modules:  # this process made none
        return 0
    from swefleet.envs.containers import labelled_runs
    from swefleet.envs.reaper import remove_run_containers

    removed = 0
    for run_id in sorted(labelled_runs()):
        try:
            removed += remove_run_containers(run_id)
        except Exception as e:  # noqa: BLE001 - the line still comes; the reaper's job later
            log.warning("could not remove the containers of %s: %s: %s (`swefleet clean "
                        "--run-label %s` removes them)", run_id, type(e).__name__, e, run_id)
    return removed
