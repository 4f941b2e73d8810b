"""The bwrap backend (`envs/bwrap/`): isolation, the persistent shell, limits, cleanup, grading.
Network checks only read /proc inside the box; nothing is ever sent anywhere.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from swefleet.envs.bwrap.box import _exited
from swefleet.envs.config import FarmConfig, SandboxLimits

from tests.integration.sandbox_backends import require

pytestmark = [pytest.mark.integration]
REPO = Path(__file__).resolve().parents[2]
RUN = f"test-bwrap-{uuid.uuid4().hex[:8]}"
CFG = FarmConfig(
    backend="bwrap",
    limits=SandboxLimits(memory_mb=1024, pids_limit=96, max_file_mb=1, lifetime_s=600),
    command_timeout_s=20,
    output_max_bytes=2000,
    output_kill_bytes=4_000_000,
    kill_grace_s=5,
)


@pytest.fixture(scope="module", autouse=True)
def _bwrap_usable():
    require("bwrap")


async def _make(task, config: FarmConfig = CFG):
    from swefleet.envs.bwrap.sandbox import BwrapSandbox

    return await BwrapSandbox.create(task.image, run_id=RUN, config=config,
                                     workdir=task.workdir, instance_id=task.instance_id)


def _pids_in_namespace(ns: str) -> list[int]:
    """The processes of PID namespace `ns` that still run (a zombie, such as a closed box's
    PID 1 that the host's init has not reaped yet, runs nothing and holds no file)."""
    pids = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                if (os.readlink(f"/proc/{entry.name}/ns/pid") == ns
                        and not _exited(int(entry.name))):
                    pids.append(int(entry.name))
            except OSError:
                pass
    return pids


async def test_isolation_and_persistent_shell(envs_tiny_task):
    async with await _make(envs_tiny_task) as sb:
        r = await sb.run("id -u; id -g; hostname; tail -n +3 /proc/net/dev | cut -d: -f1")
        assert r.output.split() == ["1000", "1000", "sandbox", "lo"], r.output
        r = await sb.run(f"touch /usr/x; ls {REPO} /work; ls /proc | grep -c '^[0-9]'")
        assert "Read-only file system" in r.output and "No such file" in r.output
        assert int(r.output.split()[-1]) < 10, r.output  # only the box's own processes
        r = await sb.run("grep CapEff /proc/self/status")
        assert r.output.split()[-1] == "0000000000000000"
        await sb.run("cd /tmp && export X=42")
        assert (await sb.run("echo $X $PWD")).output == "42 /tmp\n"
        await sb.write_file("calc.py", b"def add(a, b):\n    return a + b\n")
        assert await sb.read_file("/testbed/calc.py") == b"def add(a, b):\n    return a + b\n"
        with pytest.raises(FileNotFoundError):
            await sb.read_file("nope.txt")
        patch = await sb.diff()
        assert "+    return a + b" in patch
    async with await _make(envs_tiny_task) as fresh:  # its own copy of the repository
        assert "return a - b" in (await fresh.read_file("calc.py")).decode()
        assert (await fresh.apply_patch(patch)).exit_code == 0
        assert (await fresh.run("python3 -m pytest -q")).output.count("1 passed") == 1


async def test_timeouts_output_and_fork_bomb_are_contained(envs_tiny_task):
    async with await _make(envs_tiny_task) as sb:
        started = time.monotonic()
        r = await sb.run("sleep 1000", timeout_s=1)
        assert r.timed_out and r.exit_code is None and time.monotonic() - started < 5
        r = await sb.run("yes")
        assert "killed after 4000000 bytes" in r.output and r.truncated_bytes > 0
        r = await sb.run("head -c 2000000 /dev/zero > big; echo $?")
        assert "File too large" in r.output or r.output.strip().endswith("153"), r.output
        await sb.run(":(){ :|:& };:", timeout_s=3)
        for _ in range(3):  # the bomb is wiped by the command that finds the box full
            await asyncio.sleep(1.2)
            r = await sb.run("echo still here", timeout_s=5)
            if "still here" in r.output and sb.box.process_count() < 10:
                break
        assert "still here" in r.output and sb.box.process_count() < 10


async def test_close_leaves_no_process(envs_tiny_task):
    sb = await _make(envs_tiny_task)
    await sb.run("(sleep 1000 &); sleep 1000 &")
    ns = os.readlink(f"/proc/{sb.box.pid}/ns/pid")
    # PID 1 and the persistent shell's processes at least (what the command left behind is
    # ended by the shell itself, sooner or later)
    assert len(_pids_in_namespace(ns)) >= 3
    await sb.close()
    assert _pids_in_namespace(ns) == [] and not sb.box.dir.exists()


def test_a_dead_farm_leaves_no_process(envs_tiny_task):
    script = textwrap.dedent(f"""
        import asyncio, os, sys
        from swefleet.envs.bwrap.sandbox import BwrapSandbox
        from swefleet.envs.config import FarmConfig
        async def main():
            sb = await BwrapSandbox.create({envs_tiny_task.image!r}, run_id="orphan",
                                           config=FarmConfig(backend="bwrap"))
            await sb.run("sleep 1000 &")
            print(os.readlink(f"/proc/{{sb.box.pid}}/ns/pid"), flush=True)
            await asyncio.sleep(1000)
        asyncio.run(main())
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE,
                            text=True)
    try:
        ns = proc.stdout.readline().strip()
        assert ns and _pids_in_namespace(ns)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 10
    while _pids_in_namespace(ns) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _pids_in_namespace(ns) == []
    from swefleet.envs.bwrap.box import sweep_dead
    from swefleet.envs.bwrap.rootfs import default_dir

    left = sweep_dead(default_dir("sandboxes"))  # its copies: removed by the next process's first box
    assert any(d.name.startswith(f"{proc.pid}.") for d in left)


async def test_farm_hands_out_sandboxes(envs_tiny_task):
    from swefleet.envs.backends import make_farm

    async with make_farm(RUN, CFG) as farm:
        async with farm.acquire(envs_tiny_task) as sb:
            assert (await sb.run("git status --short; echo ok")).output == "ok\n"
        assert farm.stats.created == 1 and farm.stats.in_use == 0


@pytest.mark.parametrize("agent,rate", [("oracle", 1.0), ("empty", 0.0)])
def test_eval_through_bwrap(tmp_path, agent, rate):
    import json

    cfg = tmp_path / "bwrap.toml"
    cfg.write_text('[envs]\nbackend = "bwrap"\n')
    out = tmp_path / agent
    proc = subprocess.run(
        [sys.executable, "-m", "swefleet", "eval", "--agent", agent, "--tasks",
         str(REPO / "envs/data/quickstart/tasks.jsonl"), "--split", "heldout",
         "--output-dir", str(out), "--config", str(cfg)],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["success_rate"] == rate and report["infra_errors"] == 0
    assert report["n_episodes"] == 3


THREADS = textwrap.dedent("""
    import threading
    barrier = threading.Barrier(24)
    def work():
        barrier.wait()
        keep = [str(i) * 3 for i in range(20000)]  # small objects: the thread's malloc arena
        barrier.wait()
    threads = [threading.Thread(target=work) for _ in range(24)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("threads done")
""")


async def test_threads_fit_the_address_space_limit(envs_tiny_task):
    """24 threads allocating at once fit in 1 GiB of address space: the box caps glibc's malloc
    arenas (64 MiB reserved each); with up to 64 arenas (8 a core on 8 cores) they do not."""
    async with await _make(envs_tiny_task) as sb:
        await sb.write_file("/tmp/threads.py", THREADS.encode())
        r = await sb.run("echo $MALLOC_ARENA_MAX; python3 /tmp/threads.py")
        assert r.output.split("\n")[:2] == ["2", "threads done"], r.output
    many = CFG.model_copy(update={"session_env": {**CFG.session_env, "MALLOC_ARENA_MAX": "64"}})
    async with await _make(envs_tiny_task, many) as sb:
        await sb.write_file("/tmp/threads.py", THREADS.encode())
        r = await sb.run("python3 /tmp/threads.py")
        assert "threads done" not in r.output, r.output
        assert "can't start new thread" in r.output or "MemoryError" in r.output, r.output


def test_an_export_killed_midway_leaves_a_container_the_reaper_removes(envs_tiny_task, tmp_path):
    """An export makes a stopped container and removes it in `finally`; a process killed with
    SIGKILL meanwhile never gets there. The container carries its owner's labels, so the next
    run's reaper removes it."""
    from swefleet.envs.containers import docker_client
    from swefleet.envs.reaper import reap_dead_runs

    child = textwrap.dedent(f"""
        import subprocess, sys, time
        from swefleet.envs.bwrap import rootfs
        real = subprocess.Popen
        def held(argv, *a, **k):
            if argv[:2] == ["docker", "export"]:
                print("exporting", flush=True)
                time.sleep(120)
            return real(argv, *a, **k)
        subprocess.Popen = held
        rootfs.ensure_rootfs({envs_tiny_task.image!r}, {str(tmp_path / "cache")!r})
    """)
    proc = subprocess.Popen([sys.executable, "-c", child], cwd=REPO, stdout=subprocess.PIPE,
                            text=True)
    assert proc.stdout.readline().strip() == "exporting"
    proc.kill()
    proc.wait()
    client = docker_client()
    try:
        def left() -> list[dict]:
            return client.api.containers(
                all=True, filters={"label": f"swefleet.owner_pid={proc.pid}"})

        assert [c["Labels"]["swefleet.kind"] for c in left()] == ["export"]
        reap_dead_runs(client)
        assert left() == []
    finally:
        client.close()
