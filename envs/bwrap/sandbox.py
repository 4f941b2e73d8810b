"""`BwrapSandbox`: the `Sandbox` protocol over a bubblewrap box (`envs/bwrap/box.py`).

It is a `DockerSandbox` whose transport is swapped: the persistent shell and its killer are
processes entered into the box with nsenter, talking over socketpairs (the same shell protocol,
`envs/shell.py`, unframed); `exec`, `diff`, `read_file` and `write_file` run short processes in
the box. Commands, timeouts (the job's process group is killed inside), output caps and the
patch logic are the Docker sandbox's own code.
"""

from __future__ import annotations

import asyncio
import errno
import posixpath
import shlex
import socket
import time
import uuid

from swefleet.envs.bwrap.box import Box
from swefleet.envs.bwrap.rootfs import ensure_rootfs
from swefleet.envs.config import FarmConfig, SandboxLimits
from swefleet.envs.protocol import CommandResult, InfraError
from swefleet.envs.sandbox import DockerSandbox
from swefleet.envs.session import SessionDied, ShellSession

_MISSING, _IS_DIR, _TOO_BIG = 44, 45, 46
_FORK_FAILED = "Resource temporarily unavailable"
_PIDS_NOTE = ("[swefleet: the sandbox hit its pids limit; all processes were killed and a new "
              "shell was started, cwd/env reset]")


class BwrapSandbox(DockerSandbox):
    """A bwrap box plus its shell session. Create with `BwrapSandbox.create`."""

    def __init__(self, box: Box, *, image: str, config: FarmConfig) -> None:
        super().__init__(None, box.dir.name, image=image, limits=box.limits, config=config,
                         workdir=box.workdir)
        self.box = box
        self._counted = 0.0
        self.session = ShellSession(self._open_exec, start_timeout_s=config.session_start_timeout_s,
                                    kill_grace_s=config.kill_grace_s, framed=False)

    @classmethod
    async def create(  # type: ignore[override]
        cls,
        image: str,
        *,
        run_id: str,
        config: FarmConfig,
        limits: SandboxLimits | None = None,
        workdir: str = "/testbed",
        instance_id: str = "",
    ) -> BwrapSandbox:
        """Export the image's rootfs (once), start the box and its shell."""
        limits = limits or config.limits
        entry = await asyncio.to_thread(ensure_rootfs, image, config.bwrap.cache_dir)
        name = f"{run_id}-{instance_id}-{uuid.uuid4().hex[:8]}".replace("/", "_")
        box = await Box.start(entry, workdir, limits, config.bwrap, config.session_env, name)
        sb = cls(box, image=image, config=config)
        try:
            async with asyncio.timeout(config.session_start_timeout_s):
                await sb.session.start()
        except BaseException as e:
            await asyncio.shield(sb.close())
            if isinstance(e, (SessionDied, TimeoutError, OSError)):
                raise InfraError(f"shell did not start in {image}: {type(e).__name__}: {e}") from e
            raise
        return sb

    async def run(self, command: str, timeout_s: float | None = None) -> CommandResult:
        """As `DockerSandbox.run`; a fork bomb left running (the box is at its pids limit: no
        cgroup reports it to the shell here; 3/4 of `pids_limit` in the box counts as full) is
        wiped by a session reset, as in Docker."""
        result = await super().run(command, timeout_s)
        limit, now = self.limits.pids_limit, time.monotonic()
        suspect = result.timed_out or _FORK_FAILED in result.output or result.exit_code == 126
        if (suspect or now - self._counted > 1.0) and "a new shell was started" not in result.output:
            self._counted = now  # (a scan of the host's /proc: at most once a second unless suspect)
            if await asyncio.to_thread(self.box.process_count) >= limit * 3 // 4:
                await self.session.reset()
                sep = "" if not result.output or result.output.endswith("\n") else "\n"
                result = result.model_copy(update={"output": result.output + sep + _PIDS_NOTE})
        return result

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        await self.session.close()
        await self.box.close()

    async def kill_over_budget(self, reason: str) -> None:
        if self.over_budget or self.closed:
            return
        self.over_budget = reason
        await self.box.close()

    async def _open_exec(self, argv: list[str]) -> socket.socket:
        ours, theirs = socket.socketpair()
        try:
            self.box.popen(argv, stdin=theirs.fileno(), stdout=theirs.fileno())
        except BaseException:
            ours.close()
            raise
        finally:
            theirs.close()
        ours.setblocking(False)
        return ours

    async def is_running(self) -> bool:
        return self.box.alive()

    async def _exec_raw(self, script: str, timeout_s: float, user: str | None = None,
                        stdin: bytes | None = None) -> tuple[bytes, bytes, int, bool, float]:
        self._check_budget()
        if not self.box.alive():
            self._check_budget()
            raise InfraError(f"sandbox {self.container_id} is gone")
        start = time.monotonic()
        rc, out, err, timed_out = await self.box.exec_once(script, timeout_s, stdin)
        self._check_budget()
        return out, err, rc, timed_out, time.monotonic() - start

    async def read_file(self, path: str) -> bytes:
        """Bytes of a file (relative to the workdir; symlinks followed inside the box)."""
        target = self._abs(path)
        limit = self.config.read_file_max_bytes
        q = shlex.quote(target)
        script = (f"[ -e {q} ] || exit {_MISSING}; [ -d {q} ] && exit {_IS_DIR}; "
                  f"n=$(stat -Lc %s -- {q}) || exit 1; "
                  f"[ \"$n\" -gt {limit} ] && {{ echo \"$n\"; exit {_TOO_BIG}; }}; exec cat -- {q}")
        out, err, rc, _, _ = await self._exec_raw(script, 60)
        if rc == 0:
            return out
        if rc == _MISSING:
            raise FileNotFoundError(target)
        if rc == _IS_DIR:
            raise IsADirectoryError(f"not a regular file: {target}")
        if rc == _TOO_BIG:
            raise OSError(errno.EFBIG, f"{target} is {out.decode().strip()} bytes, over the "
                          f"{limit}-byte limit of reading a whole file; look at parts of it "
                          "with shell commands (head, tail, sed -n, grep)")
        raise PermissionError(f"cannot read {target}: {err.decode(errors='replace').strip()}")

    async def write_file(self, path: str, data: bytes, mode: int | None = None) -> None:
        """Write a file owned by the sandbox user; parent directories are created. An existing
        file is overwritten in place and keeps its mode unless `mode` is given; a new one gets
        `mode`, else 0o644."""
        target = self._abs(path)
        q, parent = shlex.quote(target), shlex.quote(posixpath.dirname(target))
        chmod = f"chmod {mode:o} -- {q}" if mode is not None else f"[ -n \"$kept\" ] || chmod 644 -- {q}"
        script = f"mkdir -p -- {parent} && {{ [ -e {q} ] && kept=1; cat > {q}; }} && {chmod}"
        _, err, rc, _, _ = await self._exec_raw(script, 60, stdin=data)
        if rc != 0:
            raise PermissionError(f"cannot write {target}: {err.decode(errors='replace').strip()}")
