"""Hostile input to a real sandbox, on both backends (Docker, bwrap): text that is not UTF-8 in
files, paths and commands, huge files, a command that prints the shell's end marker. Each must
give a clear result or error and leave the sandbox usable; nothing may be lost or replaced on
the way.

The limits differ between the backends: Docker caps the whole sandbox's memory and pids with a
cgroup; bwrap sets per-process limits (`prlimit`: address space per process, processes per
sandbox user) and has no whole-sandbox memory cap. Nothing here depends on those caps."""

from __future__ import annotations

import asyncio
import errno
import uuid

import pytest
import pytest_asyncio
from swefleet.envs.config import FarmConfig, SandboxLimits
from swefleet.envs.protocol import DiskBudgetExceeded, RepositoryBroken
from swefleet.envs.sandbox import PatchTooLarge

from tests.integration.sandbox_backends import BACKENDS, make_sandbox, require

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]
RUN = f"test-hostile-{uuid.uuid4().hex[:8]}"
CFG = FarmConfig(
    limits=SandboxLimits(memory_mb=256, pids_limit=96, lifetime_s=600),
    command_timeout_s=20,
    read_file_max_bytes=64 * 1024,
    patch_max_bytes=256 * 1024,
)


@pytest.fixture(scope="module", params=BACKENDS)
def backend(request) -> str:
    return require(request.param)


async def _make(backend, task):
    return await make_sandbox(backend, task, RUN, CFG)


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def sb(backend, envs_tiny_task):
    box = await _make(backend, envs_tiny_task)
    yield box
    await box.close()
    if backend == "docker":
        from swefleet.envs.containers import docker_client
        from swefleet.envs.reaper import leftover_containers

        assert leftover_containers(docker_client(), RUN) == []
    else:
        assert not box.box.alive()


async def test_diff_keeps_bytes_that_are_not_utf8(backend, envs_tiny_task, sb):
    """A Latin-1 file (new or changed) used to come back with U+FFFD in the patch, which then
    did not apply or wrote other bytes."""
    latin = b"caf\xe9 = 1\n"
    await sb.write_file("latin.py", latin)
    await sb.write_file("sp ace*.txt", b"\xff\xfe\n")
    calc = await sb.read_file("calc.py")
    await sb.write_file("calc.py", calc.replace(b"a - b", b"a + b") + b"# \xe9t\xe9\n")
    patch = await sb.diff()
    assert "\ufffd" not in patch and "GIT binary patch" in patch
    assert "+    return a + b" not in patch  # calc.py (now Latin-1) is binary too
    async with await _make(backend, envs_tiny_task) as fresh:
        applied = await fresh.apply_patch(patch)
        assert applied.exit_code == 0, applied.output
        assert await fresh.read_file("latin.py") == latin
        assert await fresh.read_file("sp ace*.txt") == b"\xff\xfe\n"
        assert await fresh.read_file("calc.py") == await sb.read_file("calc.py")
    await sb.run("git checkout -q -- . && git clean -fdq")
    await sb.write_file("calc.py", calc + b"# plain\n")
    assert "+# plain" in await sb.diff()  # a UTF-8 change stays a text diff
    await sb.run("git checkout -q -- .")


async def test_reading_a_file_over_the_limit_is_refused_unread(backend, envs_tiny_task):
    """Before: a 1 GB file was read whole into the orchestrator's memory (several copies)."""
    box = await _make(backend, envs_tiny_task)
    try:
        await box.run("head -c 8000000 /dev/zero > big.bin && ln -sf big.bin link.bin")
        for name in ("big.bin", "link.bin"):
            with pytest.raises(OSError) as e:
                await box.read_file(name)
            assert e.value.errno == errno.EFBIG and "8000000 bytes" in str(e.value)
        await box.run("truncate -s 60000 big.bin")
        assert len(await box.read_file("link.bin")) == 60000
    finally:  # an archive stream left open would hold the container: removal would hang
        async with asyncio.timeout(20):
            await box.close()


async def test_paths_and_commands_with_lone_surrogates(sb):
    """`\\ud800` in a tool call's JSON gives a str that is not UTF-8: a clear OSError for a
    path (the file tools show it), bytes passed through for a command; never an exception
    that ends the episode as an infrastructure error."""
    for op in (sb.read_file("a\ud800"), sb.write_file("a\ud800", b"x")):
        with pytest.raises(OSError) as e:
            await op
        assert e.value.errno == errno.EILSEQ
    r = await sb.run("printf %s 'x\ud800y' | od -An -tx1")
    assert r.exit_code == 0 and r.output.split() == ["78", "ed", "a0", "80", "79"]
    assert (await sb.run("echo still here")).output == "still here\n"


async def test_a_printed_end_marker_is_output(sb):
    """The marker's nonce is readable in /dev/shm; printing it with garbage after it used to
    raise ValueError out of `run` (an infra error) and desynchronise the session."""
    script = (
        "n=$(ls -a /dev/shm /tmp | grep -o 'swefleet-[0-9a-f]*-state' | head -1 | cut -d- -f2)\n"
        "j=$(( $(cat /dev/shm/.swefleet-$n-pgid /tmp/.swefleet-$n-pgid 2>/dev/null"
        " | cut -d' ' -f1) ))\n"
        "printf 'a\\036%s:E%d:garbage\\nb\\n' $n $j"
    )
    r = await sb.run(script)
    assert r.exit_code == 0 and r.output.startswith("a\x1e") and r.output.endswith(":garbage\nb\n")
    assert (await sb.run("echo next")).output == "next\n"


async def test_a_patch_of_huge_files_is_refused_before_git_reads_them(sb):
    """Before: `git diff --binary` of a file near the memory limit was OOM-killed (an infra
    error, the agent's doing unpunished), or a patch of hundreds of MB went to the grader."""
    await sb.run("head -c 200000 /dev/urandom > junk.bin && head -c 100000 /dev/zero > junk2.log")
    with pytest.raises(PatchTooLarge, match=r"hold 0\.3 MiB, over patch_max_bytes") as e:
        await sb.diff()
    assert isinstance(e.value, DiskBudgetExceeded)  # the agent loop: limit_disk, scored 0
    await sb.run("rm junk.bin")
    assert "GIT binary patch" in await sb.diff()  # 100 kB: still made
    await sb.run("rm junk2.log")
    assert await sb.diff() == ""


async def test_an_agent_that_removes_git_gets_no_patch_not_an_infra_error(backend, envs_tiny_task):
    """`rm -rf .git` (or a corrupted one) used to make `diff()` raise InfraError: the episode
    was masked as an infrastructure failure, an escape from reward 0 a policy could learn."""
    box = await _make(backend, envs_tiny_task)
    try:
        await box.run("printf 'garbage' > .git/HEAD")
        with pytest.raises(RepositoryBroken, match="git diff failed"):
            await box.diff()
        await box.run("rm -rf .git")
        with pytest.raises(RepositoryBroken, match="git diff failed"):
            await box.diff()
    finally:
        await box.close()
