"""A classic fork bomb in a real Docker sandbox: the command ends with its processes (the bomb is
killed with it, or every agent process and the shell when it reached the pids limit first) and
the next command's output is its own, in this episode and in a fresh one; also where the shell
cannot see its pids cgroup (cgroup v2 with the host's namespace, a masked sysfs), so only the
fork failures in the output tell."""

from __future__ import annotations

import time
import uuid

import pytest
from swefleet.envs import shell
from swefleet.envs.config import FarmConfig, SandboxLimits
from swefleet.envs.sandbox import DockerSandbox

pytestmark = [pytest.mark.integration]
RUN = f"test-forkbomb-{uuid.uuid4().hex[:8]}"
CFG = FarmConfig(
    limits=SandboxLimits(memory_mb=256, pids_limit=64, cpus=1.0, lifetime_s=300),
    command_timeout_s=20,
    output_max_bytes=4000,
    kill_grace_s=2.0,
)
CGROUP_PROBE = "for __sf_f in /sys/fs/cgroup/pids/pids /sys/fs/cgroup/pids; do"


async def _make(task) -> DockerSandbox:
    from swefleet.envs.containers import docker_client

    return await DockerSandbox.create(
        docker_client(), task.image, run_id=RUN, config=CFG, workdir=task.workdir,
        instance_id=task.instance_id,
    )


async def _pids(box: DockerSandbox) -> int:
    r = await box.exec("cat /sys/fs/cgroup/pids.current 2>/dev/null || "
                       "cat /sys/fs/cgroup/pids/pids.current", timeout_s=10, user="0")
    return int(r.output.split()[0])


def test_fork_failures_are_recognised():
    cap = shell.OutputCapture(b"\x1etag:", 1000)
    cap.feed(b"x\nbash: fork: retry: Resource temporarily unavailable\n")
    assert shell.fork_failed(cap)
    cap = shell.OutputCapture(b"\x1etag:", 1000)
    cap.feed(b"grep found 'fork: retry: Resource temporarily unavailable' in the log\n")
    assert not shell.fork_failed(cap)


@pytest.mark.asyncio
@pytest.mark.parametrize("cgroup_visible", [True, False], ids=["cgroup", "no-cgroup"])
async def test_fork_bomb_then_echo_ok_in_the_same_and_a_fresh_episode(
    envs_tiny_task, monkeypatch, cgroup_visible
):
    assert CGROUP_PROBE in shell.BOOTSTRAP
    if not cgroup_visible:
        monkeypatch.setattr(
            shell, "BOOTSTRAP", shell.BOOTSTRAP.replace(CGROUP_PROBE, "for __sf_f in /none; do")
        )
    async with await _make(envs_tiny_task) as box:
        await box.run("cd /tmp && export KEEP=1")
        await box.run(":(){ :|:& };:", timeout_s=5)  # backgrounds itself and ends at once:
        assert await _pids(box) < 10  # what it left running was killed with it
        started = time.monotonic()
        r = await box.run("echo ok", timeout_s=10)
        assert r.output == "ok\n" and r.exit_code == 0, r  # its own output, none of the bomb's
        assert time.monotonic() - started < 8  # not after a timeout and a kill
        r = await box.run("ls / | head -1 && echo $KEEP-$PWD")
        # the shell survives, unless the bomb reached the pids limit before it ended (a new one)
        assert r.exit_code == 0 and r.output.endswith(("1-/tmp\n", "-/testbed\n")), r
        assert r.output.endswith("1-/tmp\n") or box.session.restarts >= 1
    async with await _make(envs_tiny_task) as fresh:
        r = await fresh.run("echo ok", timeout_s=10)
        assert r.output == "ok\n" and r.exit_code == 0
