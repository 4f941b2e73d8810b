"""inference.launch: subprocess servers start on a free port, fail loudly, and stop for sure."""

from __future__ import annotations

import os
import sys
import time

import httpx
import pytest
from swefleet.inference.launch import ServerStartError, start_scripted_server, start_server

pytestmark = pytest.mark.integration


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_context_manager_stops_the_whole_process_group(tmp_path):
    with start_scripted_server(log_path=tmp_path / "s.log") as server:
        assert server.port > 0 and server.alive()
        assert httpx.get(f"{server.url}/health", trust_env=False).status_code == 200
        pgid = server.pid
        assert os.getpgid(server.pid) == pgid  # its own group
    assert not server.alive() and not group_alive(pgid)
    assert server.stop() is not None  # idempotent


def test_process_that_exits_raises_with_its_log(tmp_path):
    argv = [sys.executable, "-m", "swefleet.inference.scripted_server", "--delay-s", "not-a-number"]
    with pytest.raises(ServerStartError, match="exited with 2") as info:
        start_server(argv, log_path=tmp_path / "bad.log", startup_timeout_s=30)
    assert "invalid float value" in str(info.value)


def test_startup_deadline_kills_a_silent_process(tmp_path):
    argv = [sys.executable, "-c", "import os, time; print(os.getpid(), flush=True); time.sleep(60)"]
    t0 = time.monotonic()
    with pytest.raises(ServerStartError, match="deadline"):
        start_server(argv, log_path=tmp_path / "silent.log", startup_timeout_s=1.0)
    assert time.monotonic() - t0 < 10
    pid = int((tmp_path / "silent.log").read_text().split()[0])
    assert not group_alive(pid)
