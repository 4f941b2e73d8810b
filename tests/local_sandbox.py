"""Test helper: `envs.protocol.Sandbox` over a local temp directory (no Docker).

Each command runs as `bash -c` in the directory, in its own process group; a timeout or a
cancellation kills the whole group. Unlike the Docker sandbox, cwd/env do not persist between
commands. The directory is a git repository committed at creation, so `diff()` is the patch.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from pathlib import Path

from swefleet.envs.protocol import CommandResult, RepositoryBroken

_GIT = ["git", "-c", "user.name=swefleet", "-c", "user.email=swefleet@localhost"]


class LocalShellSandbox:
    """A git repo in `root`; commands run there with a timeout."""

    def __init__(self, root: Path, max_output_chars: int = 200_000) -> None:
        self.root = Path(root)
        self.workdir = str(self.root)
        self.max_output_chars = max_output_chars
        self.commands: list[str] = []

    @classmethod
    def create(cls, root: Path, files: dict[str, str]) -> LocalShellSandbox:
        """Write `files` under `root`, `git init` and commit them as the base state."""
        root.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_text(text)
        for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "base"]):
            subprocess.run([*_GIT, *args], cwd=root, check=True, capture_output=True)
        return cls(root)

    async def run(self, command: str, timeout_s: float | None = None) -> CommandResult:
        self.commands.append(command)
        return await self._exec(command, timeout_s)

    async def _exec(self, command: str, timeout_s: float | None) -> CommandResult:
        start = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            "bash",
            "-c",
            command,
            cwd=self.root,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        timed_out = False
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout_s)
        except TimeoutError:
            _kill_group(proc)
            await proc.wait()
            out, timed_out = b"", True
        except BaseException:
            _kill_group(proc)
            raise
        return self._result(out, None if timed_out else proc.returncode, timed_out, start)

    async def read_file(self, path: str) -> bytes:
        return (self.root / path).read_bytes()

    async def write_file(self, path: str, data: bytes) -> None:
        (self.root / path).parent.mkdir(parents=True, exist_ok=True)
        (self.root / path).write_bytes(data)

    async def diff(self) -> str:
        result = await self._exec("git add -A && git diff --cached --no-color HEAD", 30)
        if result.exit_code != 0:
            raise RepositoryBroken(f"git diff failed: {result.output}")
        return result.output

    def _result(
        self, out: bytes, exit_code: int | None, timed_out: bool, start: float
    ) -> CommandResult:
        text = out.decode("utf-8", errors="replace")
        cut = max(0, len(text) - self.max_output_chars)
        if cut:
            half = self.max_output_chars // 2
            text = f"{text[:half]}\n[... {cut} characters cut ...]\n{text[len(text) - half :]}"
        return CommandResult(
            output=text,
            exit_code=exit_code,
            timed_out=timed_out,
            truncated_bytes=cut,
            duration_s=time.monotonic() - start,
        )


def _kill_group(proc: asyncio.subprocess.Process) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
