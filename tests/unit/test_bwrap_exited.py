"""`envs.bwrap.box._exited`: a closed box's PID 1 counts as ended once it is a zombie (the
kernel has emptied its namespace by then), without waiting for the host's init to reap it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
from swefleet.envs.bwrap.box import _exited

pytestmark = [pytest.mark.unit]


def test_a_running_process_has_not_exited():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert not _exited(proc.pid)
    finally:
        proc.kill()
        proc.wait()


def test_an_unreaped_zombie_has_exited():
    proc = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and b") Z" not in _stat(proc.pid):
        time.sleep(0.01)
    assert os.path.exists(f"/proc/{proc.pid}")  # not reaped yet: still listed in /proc
    assert _exited(proc.pid)
    proc.wait()


def test_a_reaped_process_has_exited():
    proc = subprocess.Popen(["true"])
    proc.wait()
    assert _exited(proc.pid)


def _stat(pid: int) -> bytes:
    return open(f"/proc/{pid}/stat", "rb").read()
