"""Standby servers: a process with the server's modules imported becomes the server on a
restart (same PID); it falls back to a fresh start when it cannot (gone, other environment,
an entry it cannot load), and refuses a bad activation line with one line."""

from __future__ import annotations

import os
import sys

import httpx
import pytest
from swefleet.inference.launch import wait_ready
from swefleet.inference.standby import Standby, StandbyKind, spawn_standby

from tests.integration.test_inference_supervisor import greedy_logprobs, supervised, until

pytestmark = pytest.mark.integration
SCRIPTED = StandbyKind(entry="swefleet.inference.scripted_server:main", preload=("fastapi",))
SCRIPTED_ARGV = [sys.executable, "-m", "swefleet.inference.scripted_server", "--port", "0",
                 "--policy-version", "7"]


def wait_exit(standby: Standby, timeout_s: float = 60.0) -> int:
    return standby.proc.wait(timeout_s)


def test_a_standby_becomes_the_server_it_is_given(tmp_path):
    log = tmp_path / "server.log"
    standby = spawn_standby(SCRIPTED, dict(os.environ), log)
    handle = standby.activate(SCRIPTED_ARGV, host="127.0.0.1", port_file=True,
                              env=dict(os.environ))
    assert handle is not None and handle.pid == standby.proc.pid
    try:
        wait_ready(handle, 60.0)
        health = httpx.get(f"{handle.url}/health", trust_env=False).json()
        assert health["policy_version"] == 7
    finally:
        handle.stop()
    text = log.read_text()
    assert "1/1 modules imported" in text and "becoming swefleet.inference.scripted_server" in text


def test_a_standby_that_cannot_serve_gives_way_to_a_fresh_start(tmp_path):
    env = dict(os.environ)
    other = spawn_standby(SCRIPTED, env, tmp_path / "a.log")
    assert other.activate(SCRIPTED_ARGV, host="127.0.0.1", env={**env, "X_OTHER": "1"}) is None
    assert other.proc.poll() is not None  # ended: a standby is used only in its own environment
    gone = spawn_standby(SCRIPTED, env, tmp_path / "b.log")
    gone.proc.kill()
    gone.proc.wait()
    assert gone.activate(SCRIPTED_ARGV, host="127.0.0.1", env=env) is None
    no_entry = spawn_standby(StandbyKind(entry="no_such_module_xyz:main", preload=()), env,
                             tmp_path / "c.log")
    assert wait_exit(no_entry) == 3
    assert "entry no_such_module_xyz:main cannot be loaded" in (tmp_path / "c.log").read_text()
    assert no_entry.activate(SCRIPTED_ARGV, host="127.0.0.1", env=env) is None


def test_a_bad_activation_line_is_refused_and_end_of_input_releases_it(tmp_path):
    bad = spawn_standby(SCRIPTED, dict(os.environ), tmp_path / "bad.log")
    bad.proc.stdin.write(b"\xff{not json\n")
    bad.proc.stdin.close()
    assert wait_exit(bad) == 2
    assert "bad activation line" in (tmp_path / "bad.log").read_text()
    unused = spawn_standby(StandbyKind(entry=SCRIPTED.entry, preload=("no_such_module_xyz",)),
                           dict(os.environ), tmp_path / "unused.log")
    unused.proc.stdin.close()
    assert wait_exit(unused) == 0
    text = (tmp_path / "unused.log").read_text()
    assert "0/1 modules imported" in text and "no_such_module_xyz (ModuleNotFoundError" in text


async def test_a_killed_server_restarts_as_its_standby(tmp_path, model_dir):
    inference = {"num_servers": 1, "cpu_threads": 1, "max_batch_size": 2,
                 "health_interval_s": 0.2, "standby_servers": True}
    log = tmp_path / "logs" / "server-0.log"
    async with supervised(inference, model_dir, tmp_path / "logs") as (servers, fleet,
                                                                        supervisor):
        standby = servers.standbys[0]
        assert standby is not None and standby.alive()
        await until(lambda: "modules imported" in log.read_text(), 120)
        assert "5/5 modules imported" in log.read_text()
        assert "CUDA initialised: False" in log.read_text()  # safe to fork from
        url, before = servers.urls[0], await greedy_logprobs(servers.urls[0])
        servers.handles[0].kill()
        await until(lambda: supervisor.restarts == 1)
        assert servers.handles[0].pid == standby.proc.pid and servers.urls[0] == url
        assert fleet.server(url).in_service
        assert await greedy_logprobs(url) == before
        assert servers.standbys[0] is not None and servers.standbys[0].proc.pid != standby.proc.pid
        assert supervisor.metrics()["infer/server_restart_s"] > 0
    assert servers.standbys == [None]  # stopped with the fleet
    assert "becoming swefleet.inference.engine.server" in log.read_text()

