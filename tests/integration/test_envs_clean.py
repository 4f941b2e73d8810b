"""`swefleet clean` against a real Docker daemon: a live run's container survives, a dead run's
is removed, `--all` removes both. Scoped by `--run-id` so that other runs on the daemon are
never touched by the test."""

from __future__ import annotations

import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from swefleet.envs import containers as c
from swefleet.envs.config import SandboxLimits
from swefleet.envs.sandbox import _run_container

pytestmark = pytest.mark.integration
SWEFLEET = str(Path(sys.executable).with_name("swefleet"))


@pytest.fixture(scope="module")
def client():
    from swefleet.envs.images import DEFAULT_BASE_IMAGE, image_exists

    if not image_exists(DEFAULT_BASE_IMAGE):
        pytest.skip(f"base image {DEFAULT_BASE_IMAGE} missing: run `make base-image`")
    return c.docker_client()


def _dead_owner() -> dict[str, str]:
    """Owner labels of a process that has exited (a run that crashed without cleaning up)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    start = c.process_start_time(proc.pid)
    proc.wait()
    return {c.LABEL_OWNER_PID: str(proc.pid), c.LABEL_OWNER_START: start or "1",
            c.LABEL_OWNER: f"x:{proc.pid}"}


def _start(client, run_id: str, dead: bool) -> str:
    from swefleet.envs.images import DEFAULT_BASE_IMAGE

    labels = c.sandbox_labels(run_id, 300)
    if dead:
        labels.update(_dead_owner())
    return _run_container(client, c.run_kwargs(DEFAULT_BASE_IMAGE, SandboxLimits(), labels))


def _clean(*args: str) -> str:
    out = subprocess.run([SWEFLEET, "clean", *args], capture_output=True, text=True, timeout=120,
                         check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _exists(client, cid: str) -> bool:
    import docker.errors

    try:
        return client.api.inspect_container(cid)["State"]["Running"]
    except docker.errors.NotFound:
        return False


def test_clean_removes_dead_runs_only_and_all_removes_live_ones(client):
    live_run, dead_run = (f"test-clean-{k}-{uuid.uuid4().hex[:8]}" for k in ("live", "dead"))
    live = _start(client, live_run, dead=False)
    dead = _start(client, dead_run, dead=True)
    try:
        assert "removed 0 containers" in _clean("--run-id", live_run)
        assert _exists(client, live)
        assert "removed 1 containers" in _clean("--run-id", dead_run)
        deadline = time.monotonic() + 10
        while _exists(client, dead) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _exists(client, dead)
        assert _exists(client, live)  # a live run's container survives `clean`
        out = _clean("--run-id", live_run, "--all")
        assert "removed 1 containers" in out
        assert not _exists(client, live)
    finally:
        for cid in (live, dead):
            c.remove_container(client, cid)


def test_is_dead_reads_owner_expiry_and_state():
    from swefleet.envs.reaper import is_dead

    alive = c.sandbox_labels("r", 300)
    assert not is_dead(alive, "running")
    assert is_dead({**alive, **_dead_owner()}, "running")
    assert is_dead(alive, "exited")  # a sandbox that ended
    assert is_dead(alive, "running", now=time.time() + 1000)  # past its lifetime
    assert not is_dead({**alive, c.LABEL_OWNER_HOST: "elsewhere"}, "running")  # unknown
