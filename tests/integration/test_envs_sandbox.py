"""DockerSandbox against a real Docker daemon: session semantics, kills, limits, isolation, files.

Network checks only read /proc inside the container; nothing is ever sent anywhere.
"""

from __future__ import annotations

import asyncio
import time
import uuid

import pytest
import pytest_asyncio
from swefleet.envs.config import FarmConfig, SandboxLimits
from swefleet.envs.protocol import InfraError
from swefleet.envs.sandbox import ContainerDied, DockerSandbox

from tests.integration.sandbox_backends import BACKENDS, make_sandbox, require

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]
RUN = f"test-sandbox-{uuid.uuid4().hex[:8]}"
CFG = FarmConfig(
    limits=SandboxLimits(memory_mb=256, pids_limit=96, cpus=1.0, lifetime_s=600),
    command_timeout_s=20,
    output_max_bytes=2000,
    output_kill_bytes=4_000_000,
    kill_grace_s=5,
)


@pytest.fixture(scope="module")
def client():
    from swefleet.envs.containers import docker_client

    return docker_client()


async def _make(client, task, config: FarmConfig = CFG, **limits) -> DockerSandbox:
    lim = config.limits.model_copy(update=limits)
    return await DockerSandbox.create(
        client,
        task.image,
        run_id=RUN,
        config=config,
        limits=lim,
        workdir=task.workdir,
        instance_id=task.instance_id,
    )


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def sb(client, envs_tiny_task):
    box = await _make(client, envs_tiny_task)
    yield box
    await box.close()


async def _procs(sb: DockerSandbox, pattern: str) -> int:
    """How many processes match `pattern` (the bracket trick keeps grep from matching itself)."""
    r = await sb.run(f"ps -eo args | grep -c -- '{pattern}' || true")
    return int(r.output.strip())


async def test_container_is_hardened_and_labelled(sb, client):
    info = client.api.inspect_container(sb.container_id)
    host, labels = info["HostConfig"], info["Config"]["Labels"]
    assert host["NetworkMode"] == "none"
    assert host["CapDrop"] == ["ALL"]
    assert any("no-new-privileges" in o for o in host["SecurityOpt"])
    assert host["PidsLimit"] == 96 and host["Memory"] == 256 * 2**20
    assert host["NanoCpus"] == 10**9 and host["Init"] is True
    assert labels["swefleet.run"] == RUN
    assert labels["swefleet.owner"] and float(labels["swefleet.created_at"]) > 0
    r = await sb.run("id -u; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status")
    lines = r.output.split()
    assert lines[0] == "1000" and "0000000000000000" in lines and lines[-1] == "1"


async def test_cwd_env_variables_and_functions_persist(sb):
    r = await sb.run("cd /tmp && export FOO=bar && x=5 && arr=(a b) && f() { echo fn; }")
    assert r.exit_code == 0
    r = await sb.run("pwd; echo \"$FOO $x ${arr[1]}\"; f; bash -c 'echo $FOO'; unset FOO")
    assert r.output.splitlines() == ["/tmp", "bar 5 b", "fn", "bar"]
    r = await sb.run('echo "${FOO-unset}"; cd /testbed')
    assert r.output == "unset\n"


async def test_exit_codes(sb):
    assert (await sb.run("true")).exit_code == 0
    assert (await sb.run("false")).exit_code == 1
    assert (await sb.run("exit 42")).exit_code == 42
    r = await sb.run("echo 'unterminated")
    assert r.exit_code == 2 and "unexpected EOF" in r.output
    assert (await sb.run("echo still here")).output == "still here\n"


async def test_timeout_kills_the_whole_process_group(sb):
    await sb.run("cd /tmp; export KEEP=1")
    start = time.monotonic()
    r = await sb.run("(sleep 1234; echo never) & sleep 1235 | cat; echo never", timeout_s=1)
    assert r.timed_out and r.exit_code is None and "never" not in r.output
    assert time.monotonic() - start < 5
    assert await _procs(sb, "[s]leep 123") == 0
    r = await sb.run("pwd; echo $KEEP")
    assert r.output == "/tmp\n1\n" and r.exit_code == 0


async def test_sigterm_ignoring_and_busy_loops_are_killed(sb):
    py = "import signal,time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(999)"
    r = await sb.run(f"trap '' TERM INT; python3 -c '{py}'", timeout_s=1)
    assert r.timed_out
    assert await _procs(sb, "[S]IGTERM") == 0
    r = await sb.run("while :; do :; done", timeout_s=1)  # a builtin loop inside the shell
    assert r.timed_out
    assert (await sb.run("echo ok")).output == "ok\n"


async def test_output_is_capped_head_and_tail(sb):
    r = await sb.run("seq 1 100000")
    total = sum(len(f"{i}\n") for i in range(1, 100001))
    assert r.exit_code == 0 and r.truncated_bytes == total - 2000
    assert r.output.startswith("1\n2\n3\n") and r.output.endswith("99999\n100000\n")
    assert f"[... {total - 2000} bytes cut ...]" in r.output


async def test_infinite_output_is_capped_and_killed(sb):
    r = await sb.run("yes swefleet", timeout_s=15)
    assert not r.timed_out and r.exit_code == 137
    assert r.truncated_bytes > 4_000_000 - 2000 and len(r.output) < 3000
    assert "bytes cut" in r.output and "killed after 4000000 bytes" in r.output
    assert (await sb.run("echo ok")).output == "ok\n"


async def test_invalid_utf8_is_replaced(sb):
    r = await sb.run(r"printf 'ok\xff\xfe\n'; printf '\xe2\x82\xac\n'")
    assert r.output == "ok\ufffd\ufffd\n\u20ac\n"


async def test_no_network_inside(sb):
    dev = (await sb.run("tail -n +3 /proc/net/dev")).output
    assert [line.split(":")[0].strip() for line in dev.splitlines()] == ["lo"]
    routes = (await sb.run("tail -n +2 /proc/net/route")).output
    assert routes.strip() == ""  # no default route, no route at all


async def test_cannot_see_host_files_or_processes(sb, tmp_path):
    secret = tmp_path / f"host-secret-{uuid.uuid4().hex}"
    secret.write_text("secret")
    r = await sb.run(f"test -e {secret} && echo visible || echo hidden; cat /proc/1/cmdline")
    assert r.output.startswith("hidden\n") and "sleep" in r.output


async def test_background_processes_end_with_their_command(sb):
    start = time.monotonic()
    r = await sb.run("sleep 500 & nohup sleep 501 >/dev/null 2>&1 & echo started")
    assert r.output == "started\n" and time.monotonic() - start < 3  # no hang
    assert await _procs(sb, "[s]leep 50") == 0  # killed with the command's process group
    r = await sb.run("(sleep 0.3; echo late) & echo now")
    assert r.output == "now\n"
    assert (await sb.run("sleep 0.5; echo next")).output == "next\n"  # not `late`


async def test_cancelled_command_is_killed(sb):
    task = asyncio.ensure_future(sb.run("sleep 777; echo never", timeout_s=60))
    await asyncio.sleep(0.5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    r = await sb.run("echo after")
    assert r.output == "after\n"
    assert await _procs(sb, "[s]leep 777") == 0


async def test_files_and_diff(sb, client, envs_tiny_task):
    await sb.write_file("calc.py", b"def add(a, b):\n    return a + b\n")
    await sb.write_file("pkg/new.py", b"X = 1\n")
    assert await sb.read_file("/testbed/pkg/new.py") == b"X = 1\n"
    with pytest.raises(FileNotFoundError):
        await sb.read_file("nope.txt")
    r = await sb.run("cd /testbed && ls -l pkg/new.py | cut -d' ' -f3 && python3 -m pytest -q")
    assert r.output.startswith("agent\n") and "1 passed" in r.output
    patch = await sb.diff()
    assert "+    return a + b" in patch and "b/pkg/new.py" in patch and "pycache" not in patch
    status = (await sb.run("git status --porcelain")).output
    assert "?? pkg/" in status  # diff() used its own index: nothing was staged
    async with await _make(client, envs_tiny_task) as fresh:
        applied = await fresh.apply_patch(patch)
        assert applied.exit_code == 0, applied.output
        assert await fresh.read_file("calc.py") == b"def add(a, b):\n    return a + b\n"
        assert await fresh.diff() == patch


@pytest.mark.parametrize("backend", BACKENDS)
async def test_an_edited_file_keeps_its_mode(backend, envs_tiny_task):
    """Writing over an executable file (as the agent's `str_replace` does) keeps it executable
    (a patch of an edit to a script would otherwise change its mode); a new file is 0644."""
    require(backend)
    async with await make_sandbox(backend, envs_tiny_task, RUN, CFG) as box:
        await box.run("chmod 755 calc.py")
        await box.write_file("calc.py", b"def add(a, b):\n    return a + b\n")
        await box.write_file("tool.sh", b"echo hi\n")
        modes = (await box.run("stat -c %a calc.py tool.sh")).output.split()
        assert modes == ["755", "644"], modes
        assert await box.read_file("calc.py") == b"def add(a, b):\n    return a + b\n"


async def test_agent_killing_its_own_shell_gets_a_new_one(sb):
    await sb.run("kill -9 -1")  # kills everything of the agent but this very subshell
    r = await sb.run("echo back")
    assert "new shell" in r.output  # (the command itself ran or not, depending on timing)
    r = await sb.run("echo back; pwd")
    assert r.output == "back\n/testbed\n" and r.exit_code == 0


async def _process_count(box: DockerSandbox) -> int:
    """Processes in the container once it has settled: a bomb still running is seen (and wiped)
    at the end of one of these commands at the latest."""
    count = 10**6
    for _ in range(5):
        out = (await box.run("ps -e --no-headers | wc -l", timeout_s=5)).output
        count = int(out) if out.strip().isdigit() else count
        if count < 10:
            break
        await asyncio.sleep(0.5)
    return count


async def test_fork_bomb_and_memory_hog_are_contained(client, envs_tiny_task, sb):
    cfg = CFG.model_copy(update={"kill_grace_s": 2.0})
    async with await _make(client, envs_tiny_task, cfg, pids_limit=48, memory_mb=128) as box:
        # Processes that escape the command's group and fill the pids limit, a few of them
        # ended again: the refused fork is seen at the end of the command, with half the limit
        # still taken, and the sandbox is reset (every agent process killed, a fresh shell).
        spawn = (
            "import subprocess\nps = []\ntry:\n"
            "    for _ in range(60): ps.append(subprocess.Popen(['setsid', 'sleep', '999']))\n"
            "except BlockingIOError:\n    pass\n"
            "for p in ps[:8]: p.kill(); p.wait()\nprint(len(ps), 'started')"
        )
        r = await box.run(f'python3 -c "{spawn}"', timeout_s=10)
        assert "hit its pids limit" in r.output and "new shell" in r.output, r.output
        assert 40 <= int(r.output.split(" started")[0].split()[-1]) < 48
        assert await _process_count(box) < 10
        # A classic bomb outlives its command too; within a few commands all is well again
        # (reset at a command's end, or because the next command cannot fork and times out).
        outputs = [(await box.run("bomb() { bomb | bomb & }; bomb", timeout_s=3)).output]
        await asyncio.sleep(1.0)
        while len(outputs) < 5 and outputs[-1] != "alive\n":
            outputs.append((await box.run("echo alive", timeout_s=3)).output)
        assert outputs[-1] == "alive\n", outputs
        assert await _process_count(box) < 10
        r = await box.run("python3 -c 'b = bytearray(600 * 2**20); print(len(b))'")
        assert r.exit_code == 137
        assert (await box.run("echo alive")).output == "alive\n"
    assert (await sb.run("echo neighbour fine")).output == "neighbour fine\n"


async def test_lifetime_ends_the_container(client, envs_tiny_task):
    box = await _make(client, envs_tiny_task, lifetime_s=2)
    try:
        deadline = time.monotonic() + 20
        while await box.is_running() and time.monotonic() < deadline:
            await asyncio.sleep(0.5)
        assert not await box.is_running()
        with pytest.raises(InfraError) as err:
            await box.run("echo too late")
        assert isinstance(err.value, ContainerDied)
    finally:
        await box.close()


async def test_filling_the_disk_is_stopped_at_the_file_size_cap(client, envs_tiny_task):
    async with await _make(client, envs_tiny_task, max_file_mb=8) as box:
        r = await box.run("dd if=/dev/zero of=/tmp/fill bs=1M count=64 2>&1; echo rc=$?",
                          timeout_s=30)
        # the writer gets SIGXFSZ ("File size limit exceeded") or EFBIG ("File too large")
        assert "rc=0" not in r.output and "File" in r.output, r.output
        size = (await box.run("stat -c %s /tmp/fill")).output.strip()
        assert int(size) <= 8 * 2**20
        assert (await box.run("rm /tmp/fill && echo alive")).output == "alive\n"
