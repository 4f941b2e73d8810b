"""`swefleet.app.interrupt` in a real child Python process: SIGTERM ends a command as Ctrl-C
does (inside `asyncio.run` its main task is cancelled, so its `finally` runs), with one line and
128 + the signal; Ctrl-C works even when the process started with SIGINT ignored; the child
processes a command left running are stopped (SIGKILL for those deaf to SIGTERM), grandchildren
too."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]

_COMMAND = """
import asyncio, subprocess, sys, time
from pathlib import Path
from swefleet.app import interrupt

async def work():
    try:
        Path(sys.argv[2]).write_text("started")
        await asyncio.sleep(60)
    finally:
        await asyncio.sleep(0.1)  # a cleanup that awaits: the task was cancelled, not killed
        Path(sys.argv[2]).write_text("cleaned up")

async def work_with_a_child():
    await asyncio.create_subprocess_exec("sleep", sys.argv[3])  # left running when cancelled
    Path(sys.argv[2]).write_text("started")
    await asyncio.sleep(60)

interrupt.install()
try:
    if sys.argv[1] == "async":
        asyncio.run(work())
    elif sys.argv[1] == "async-child":
        asyncio.run(work_with_a_child())
    else:
        child = subprocess.Popen(["bash", "-c", f"trap '' TERM; sleep {sys.argv[3]}; true"])
        Path(sys.argv[2]).write_text(f"started {child.pid}")
        time.sleep(60)
except KeyboardInterrupt:
    code = interrupt.stopped("demo")
    time.sleep(0.5)  # (time for a child watcher's thread to report the child it saw end)
    sys.exit(code)
"""


def _run(tmp_path: Path, kind: str, sig: int, ignore_sigint: bool = False, sleep: str = "60"):
    """Start the command, send `sig` once it started: (exit code, stderr, the state file)."""
    state = tmp_path / "state"
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN if ignore_sigint
                             else signal.default_int_handler)  # what the child inherits
    try:
        proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(_COMMAND), kind,
                                 str(state), sleep], cwd=REPO, stderr=subprocess.PIPE, text=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    deadline = time.monotonic() + 30
    while not state.exists() or not state.read_text().startswith("started"):
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.02)
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=30)
    return proc.returncode, err, state.read_text()


@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_cancels_asyncio_work_and_its_cleanup_runs(tmp_path, sig, code):
    rc, err, state = _run(tmp_path, "async", sig)
    assert (rc, state) == (code, "cleaned up"), err
    assert err == f"swefleet demo: interrupted ({signal.Signals(sig).name})\n"


def test_ctrl_c_works_in_a_process_started_with_sigint_ignored(tmp_path):
    rc, err, state = _run(tmp_path, "async", signal.SIGINT, ignore_sigint=True)
    assert (rc, state) == (130, "cleaned up"), err


def test_processes_left_running_are_stopped_and_named(tmp_path):
    seconds = f"60.{uuid.uuid4().int % 10**6}"  # no other process sleeps this
    t0 = time.monotonic()
    rc, err, _ = _run(tmp_path, "sync", signal.SIGTERM, sleep=seconds)
    assert rc == 143 and time.monotonic() - t0 < 15, err
    assert err == ("swefleet demo: interrupted (SIGTERM); stopped what it left running: "
                   "2 processes\n")  # bash and its sleep, both deaf to SIGTERM: SIGKILLed
    assert not [p for p in Path("/proc").iterdir() if p.name.isdigit()
                and _argv(p) == ["sleep", seconds]]


def test_a_child_of_a_closed_event_loop_is_stopped_without_a_warning(tmp_path):
    """asyncio's child watcher warns when a child ends after its event loop closed: here every
    such child is one the end stops, and the line stays the only one."""
    seconds = f"60.{uuid.uuid4().int % 10**6}"
    rc, err, _ = _run(tmp_path, "async-child", signal.SIGINT, sleep=seconds)
    assert rc == 130
    assert err == "swefleet demo: interrupted (SIGINT); stopped what it left running: 1 process\n"


def _argv(proc: Path) -> list[str]:
    try:
        return [a.decode() for a in (proc / "cmdline").read_bytes().split(b"\0") if a]
    except OSError:
        return []
