"""A classic fork bomb in a real sandbox, on both backends: the command ends with its processes
(the bomb is killed with it, or every agent process and the shell when it reached the pids limit
first) and the next command's output is its own, in this episode and in a fresh one; on Docker
also where the shell cannot see its pids cgroup (cgroup v2 with the host's namespace, a masked
sysfs), so only the fork failures in the output tell.

The backends count and cap processes differently: Docker with the sandbox's pids cgroup (read
here from inside), bwrap with an RLIMIT_NPROC counted per sandbox and no cgroup at all (the shell
never sees one; the test counts the processes of the box's PID namespace from the host). The
memory and CPU limits of `CFG` are cgroup caps on Docker, a per-process address-space limit and
nothing on bwrap; the assertions rely on neither."""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
from swefleet.envs import shell
from swefleet.envs.config import FarmConfig, SandboxLimits

from tests.integration.sandbox_backends import make_sandbox, require

pytestmark = [pytest.mark.integration]
RUN = f"test-forkbomb-{uuid.uuid4().hex[:8]}"
CFG = FarmConfig(
    limits=SandboxLimits(memory_mb=256, pids_limit=64, cpus=1.0, lifetime_s=300),
    command_timeout_s=20,
    output_max_bytes=4000,
    kill_grace_s=2.0,
)
CGROUP_PROBE = "for __sf_f in /sys/fs/cgroup/pids/pids /sys/fs/cgroup/pids; do"


async def _pids(box) -> int:
    if hasattr(box, "box"):  # bwrap: the box's PID namespace
        return box.box.process_count()
    r = await box.exec("cat /sys/fs/cgroup/pids.current 2>/dev/null || "
                       "cat /sys/fs/cgroup/pids/pids.current", timeout_s=10, user="0")
    return int(r.output.split()[0])


async def _settled_pids(box, within_s: float = 2.0) -> int:
    """The box's process count once the killed ones are reaped (SIGKILLed processes leave the
    count a moment after the command returned), at most `within_s` later."""
    deadline = time.monotonic() + within_s
    while (n := await _pids(box)) >= 10 and time.monotonic() < deadline:
        await asyncio.sleep(0.1)
    return n


def test_fork_failures_are_recognised():
    cap = shell.OutputCapture(b"\x1etag:", 1000)
    cap.feed(b"x\nbash: fork: retry: Resource temporarily unavailable\n")
    assert shell.fork_failed(cap)
    cap = shell.OutputCapture(b"\x1etag:", 1000)
    cap.feed(b"grep found 'fork: retry: Resource temporarily unavailable' in the log\n")
    assert not shell.fork_failed(cap)


@pytest.mark.asyncio
@pytest.mark.parametrize(("backend", "cgroup_visible"),
                         [("docker", True), ("docker", False), ("bwrap", False)],
                         ids=["docker-cgroup", "docker-no-cgroup", "bwrap"])
async def test_fork_bomb_then_echo_ok_in_the_same_and_a_fresh_episode(
    envs_tiny_task, monkeypatch, backend, cgroup_visible
):
    require(backend)
    assert CGROUP_PROBE in shell.BOOTSTRAP
    if not cgroup_visible:
        monkeypatch.setattr(
            shell, "BOOTSTRAP", shell.BOOTSTRAP.replace(CGROUP_PROBE, "for __sf_f in /none; do")
        )
    async with await make_sandbox(backend, envs_tiny_task, RUN, CFG) as box:
        await box.run("cd /tmp && export KEEP=1")
        await box.run(":(){ :|:& };:", timeout_s=5)  # backgrounds itself and ends at once:
        assert await _settled_pids(box) < 10  # what it left running was killed with it
        started = time.monotonic()
        r = await box.run("echo ok", timeout_s=10)
        assert r.output == "ok\n" and r.exit_code == 0, r  # its own output, none of the bomb's
        assert time.monotonic() - started < 8  # not after a timeout and a kill
        r = await box.run("ls / | head -1 && echo $KEEP-$PWD")
        # the shell survives, unless the bomb reached the pids limit before it ended (a new one)
        assert r.exit_code == 0 and r.output.endswith(("1-/tmp\n", "-/testbed\n")), r
        assert r.output.endswith("1-/tmp\n") or box.session.restarts >= 1
    async with await make_sandbox(backend, envs_tiny_task, RUN, CFG) as fresh:
        r = await fresh.run("echo ok", timeout_s=10)
        assert r.output == "ok\n" and r.exit_code == 0
