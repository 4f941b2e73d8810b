"""A persistent bash session over two Docker exec sockets, driven from asyncio without threads.

The shell socket carries commands (see `envs.shell` for the protocol); the killer socket reaches
an idle second shell that kills process groups with a builtin, so a timeout is enforced inside
the container even when the command's pids are exhausted. Reads use `loop.sock_recv` on the
non-blocking socket: no `docker exec` and no thread per command.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from swefleet.envs import shell
from swefleet.envs.protocol import CommandResult

log = logging.getLogger(__name__)

OpenExec = Callable[[list[str]], Awaitable[socket.socket]]
"""Starts argv in the container (stdin attached) and returns the exec's non-blocking socket."""

_RECV = 1 << 18
_DRAIN_FROM = 1 << 14


class SessionDied(Exception):
    """The shell (or its socket) ended. `partial` holds what the running command had written."""

    def __init__(self, reason: str, partial: CommandResult | None = None) -> None:
        super().__init__(reason)
        self.partial = partial


@dataclass
class _Job:
    n: int
    capture: shell.OutputCapture
    started: float = field(default_factory=time.monotonic)
    kill_wanted: bool = False
    kill_sent: bool = False
    timed_out: bool = False
    note: str = ""
    fork_check: bool = True
    """Still to check whether a fork failure in the output kept the job from starting."""


class _ForkBlocked(Exception):
    """The pids limit is full and the job could not even be started (nothing of it ran)."""


_PIDS_NOTE = (
    "[swefleet: the sandbox hit its pids limit; all processes were killed and a new shell was "
    "started, cwd/env reset]"
)


class ShellSession:
    """One bash process whose cwd, variables and functions persist between commands."""

    def __init__(
        self,
        open_exec: OpenExec,
        *,
        start_timeout_s: float,
        kill_grace_s: float,
        framed: bool = True,
    ):
        """`framed`: the sockets carry Docker's multiplexed exec stream; False: plain stdout
        (stderr elsewhere), as from a subprocess (the bwrap backend)."""
        self._open_exec = open_exec
        self._framed = framed
        self.start_timeout_s = start_timeout_s
        self.kill_grace_s = kill_grace_s
        self._lock = asyncio.Lock()
        self._sock: socket.socket | None = None
        self._killer: socket.socket | None = None
        self._stale: _Job | None = None
        self._bg: set[asyncio.Task[None]] = set()
        self.shell_pid = self.uid = self.gid = 0
        self.head_commit = ""
        """`git rev-parse HEAD` of the working directory when the session first started."""
        self.restarts = 0

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the shell and the killer; wait for the shell to report ready."""
        self._nonce = secrets.token_hex(8)
        self._demux, self._pending, self._n = self._new_demux(), b"", 0
        self._leftovers: shell.OutputCapture | None = None
        """Until the shell's `F` line of the last job: what that job left running wrote."""
        opened = await asyncio.gather(
            self._open_exec(shell.SHELL_ARGV),
            self._open_exec([*shell.SHELL_ARGV, "-c", shell.killer_script(self._nonce)]),
            return_exceptions=True,
        )
        errors = [r for r in opened if isinstance(r, BaseException)]
        if errors:
            for r in opened:
                if isinstance(r, socket.socket):
                    r.close()
            raise errors[0]
        self._sock, self._killer = opened  # type: ignore[assignment]
        await self._send(shell.bootstrap_text(self._nonce))
        async with asyncio.timeout(self.start_timeout_s):
            await self._await_ready()

    def _new_demux(self) -> shell.Demux | shell.PlainStream:
        return shell.Demux() if self._framed else shell.PlainStream()

    async def _await_ready(self) -> None:
        pattern, buf = shell.ready_re(self._nonce), bytearray()
        while (m := pattern.search(buf)) is None:
            for stream, payload in self._demux.feed(await self._recv()):
                if stream == 1:
                    buf += payload
                else:
                    log.debug("shell stderr at start: %r", payload[:500])
        self.shell_pid, self.uid, self.gid = (int(g) for g in m.groups()[:3])
        self.head_commit = self.head_commit or m.group(4).decode()
        self._pending = bytes(buf[m.end() :])

    async def close(self) -> None:
        for task in list(self._bg):
            task.cancel()
        self._close_sockets()

    def _close_sockets(self) -> None:
        for sock in (self._sock, self._killer):
            if sock is not None:
                sock.close()
        self._sock = self._killer = None

    def looks_alive(self) -> bool:
        """Cheap check (no I/O wait): both sockets open and not at end-of-stream."""
        for sock in (self._sock, self._killer):
            if sock is None:
                return False
            try:
                if sock.recv(1, socket.MSG_PEEK) == b"":
                    return False
            except BlockingIOError:
                pass
            except OSError:
                return False
        return True

    async def restart(self) -> None:
        """A fresh shell (state is lost); kills the old shell if it still lives."""
        old_pid = self.shell_pid
        self._close_sockets()
        await self.start()
        self.restarts += 1
        if old_pid:
            await self._send_kill(str(old_pid))

    # -- commands --------------------------------------------------------------------------

    async def run(
        self,
        command: str,
        timeout_s: float,
        max_bytes: int,
        kill_bytes: int | None = None,
        persist: bool = True,
    ) -> CommandResult:
        """Run `command`; on timeout its process group is killed and `exit_code` is None."""
        async with self._lock:
            note = ""
            if self._sock is None:
                await self.start()
            elif not self.looks_alive():  # e.g. an earlier command ran `kill -9 -1`
                note = "[swefleet: the shell had ended; a new shell was started, cwd/env reset]\n"
                await self.reset()
            await self._settle_stale()
            job = await self._start_job(command, max_bytes, persist)
            try:
                try:
                    await self._run_job(job, timeout_s, kill_bytes)
                except _ForkBlocked:  # a bomb left running: wipe it, then run the command
                    await self.reset()
                    note += _PIDS_NOTE + "\n"
                    job = await self._start_job(command, max_bytes, persist)
                    job.fork_check = False
                    await self._run_job(job, timeout_s, kill_bytes)
                cap = job.capture  # a fork bomb (the cgroup says, else the fork failures)
                if cap.pids_full or (cap.pids_unknown and shell.fork_failed(cap)):
                    job.note = _PIDS_NOTE
                    await self.reset()
            except asyncio.CancelledError:
                job.kill_wanted, job.fork_check, self._stale = True, False, job
                self._spawn(self._settle_in_background())
                raise
            except SessionDied as e:
                raise SessionDied(str(e), self._result(job, note)) from None
            return self._result(job, note)

    async def _start_job(self, command: str, max_bytes: int, persist: bool) -> _Job:
        self._n += 1
        job = _Job(self._n, shell.OutputCapture(shell.end_tag(self._nonce, self._n), max_bytes))
        await self._send(shell.command_text(self._nonce, self._n, command, persist))
        if self._pending:
            self._feed_stdout(job, self._pending)
            self._pending = b""
        return job

    async def _run_job(self, job: _Job, timeout_s: float, kill_bytes: int | None) -> None:
        try:
            async with asyncio.timeout(timeout_s):
                await self._pump(job, kill_bytes)
            if job.kill_sent:  # killed for its output: drop what it wrote while dying
                await self._sync(job.n)
            else:  # the shell kills what it left running; its output until then is dropped
                self._leftovers = shell.OutputCapture(shell.reap_tag(self._nonce, job.n), 0)
            return
        except TimeoutError:
            job.kill_wanted = job.timed_out = True
        await self._finish_killed(job)

    async def _finish_killed(self, job: _Job) -> None:
        """Wait for a killed job's end marker; restart the shell if it never comes."""
        try:
            async with asyncio.timeout(self.kill_grace_s):
                await self._pump(job, None)
                await self._sync(job.n)
        except (TimeoutError, SessionDied) as e:
            reason = "did not stop" if isinstance(e, TimeoutError) else f"ended the shell ({e})"
            job.note = (
                f"[swefleet: the command {reason}; all processes were killed and a new "
                "shell was started, cwd/env reset]"
            )
            await self.reset()

    async def reset(self, attempts: int = 5) -> None:
        """Kill every process of the sandbox user (the killer's `kill -9 -1` spares only itself
        and PID 1), then start a fresh shell. Recovers from fork bombs and stuck shells: the
        old killer (it needs no fork) is kept until the new shell is up, and kills again
        before each retry (a start fails while a bomb, or its zombies, fill the pids limit)."""
        old_killer, self._killer = self._killer, None
        try:
            for attempt in range(attempts):
                if old_killer is not None:  # before new processes start
                    try:
                        await self._send_kill("-1", wait_ack=True, killer=old_killer,
                                              timeout_s=max(10.0, self.kill_grace_s))
                    except SessionDied as e:
                        log.info("killer unavailable for reset: %s", e)
                        old_killer.close()
                        old_killer = None
                try:
                    self._close_sockets()
                    await self.start()
                    self.restarts += 1
                    return
                except Exception as e:
                    if attempt == attempts - 1:
                        raise SessionDied(f"reset failed: {type(e).__name__}: {e}") from e
                    await asyncio.sleep(0.25 * 2**attempt)
        finally:
            if old_killer is not None:
                old_killer.close()

    async def _pump(self, job: _Job, kill_bytes: int | None) -> None:
        """Read until the job's end marker; kill the job's process group once that is wanted."""
        while not job.capture.done:
            if job.kill_wanted and not job.kill_sent:
                job.kill_sent = True
                await self._kill_job(job.n)
            forks = False
            for stream, payload in self._demux.feed(await self._recv()):
                if stream == 1:
                    self._feed_stdout(job, payload)
                    forks = forks or b"ork" in payload
                else:
                    self._on_stderr(job, payload)
            if forks and job.fork_check and not job.capture.done and shell.fork_failed(job.capture):
                job.fork_check = False  # the shell may be retrying the job's own fork
                # (slow to answer while a bomb shares the container's CPU quota with it)
                started = await self._send_kill(f"P{job.n}", wait_ack=True,
                                                 timeout_s=max(10.0, self.kill_grace_s))
                if started == "w":
                    raise _ForkBlocked
            if kill_bytes is not None and job.capture.total > kill_bytes and not job.kill_wanted:
                job.kill_wanted = True
                job.note = f"[swefleet: the command was killed after {kill_bytes} bytes of output]"

    async def _sync(self, n: int) -> None:
        """After a kill: drop what the dying group wrote after the end marker (the killer has
        waited until the group was gone, so all of it comes before the sync tag)."""
        tail = shell.OutputCapture(shell.sync_tag(self._nonce, n), 0)
        await self._send(shell.sync_text(n))
        tail.feed(self._pending)
        try:
            async with asyncio.timeout(self.kill_grace_s):
                while not tail.done:
                    for stream, payload in self._demux.feed(await self._recv()):
                        if stream == 1 and not tail.done:
                            tail.feed(payload)
                        elif stream == 1:
                            tail.rest += payload
        except TimeoutError:
            raise SessionDied("the shell did not answer a sync") from None
        if tail.total:
            log.debug("dropped %d bytes written by a killed job after its end", tail.total)
        self._pending = tail.rest

    def _feed_stdout(self, job: _Job, payload: bytes) -> None:
        if self._leftovers is not None:
            if not self._leftovers.feed(payload):
                return
            if self._leftovers.total:
                log.debug("dropped %d bytes written after its end by what job %d left running",
                          self._leftovers.total, job.n - 1)
            payload, self._leftovers = self._leftovers.rest, None
        if job.capture.done:
            self._pending += payload
        elif job.capture.feed(payload):
            self._pending += job.capture.rest

    def _on_stderr(self, job: _Job, payload: bytes) -> None:
        log.debug("shell stderr during job %d: %r", job.n, payload[-500:])

    async def _kill_job(self, n: int) -> bool:
        """Kill job `n`'s process group; waits (briefly) until the job has started. False if it
        could not be killed (its fork failed): the caller waits for the shell or resets it."""
        for _ in range(int(self.kill_grace_s / 0.02)):
            answer = await self._send_kill(f"J{n}", wait_ack=True)
            if answer != "w":
                return answer == "k"
            await asyncio.sleep(0.02)
        return False

    async def _settle_stale(self) -> None:
        """Finish (kill and drain) a command whose caller was cancelled."""
        job, self._stale = self._stale, None
        if job is not None:
            await self._finish_killed(job)
            self._pending = b""

    async def _settle_in_background(self) -> None:
        try:
            async with self._lock:
                await self._settle_stale()
        except Exception as e:  # noqa: BLE001 - cleanup of a cancelled command; next run retries
            log.warning("could not stop a cancelled command: %s: %s", type(e).__name__, e)

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._bg.add(task)
        task.add_done_callback(self._bg.discard)

    def _result(self, job: _Job, note: str = "") -> CommandResult:
        text, cut = job.capture.result()
        text = note + text
        if job.note:
            text += ("" if not text or text.endswith("\n") else "\n") + job.note
        rc = job.capture.rc if job.capture.done else -1
        return CommandResult(
            output=text,
            exit_code=None if job.timed_out else rc,
            timed_out=job.timed_out,
            truncated_bytes=cut,
            duration_s=time.monotonic() - job.started,
        )

    # -- sockets ---------------------------------------------------------------------------

    async def _recv(self) -> bytes:
        if self._sock is None:
            raise SessionDied("the session is closed")
        try:
            data = await asyncio.get_running_loop().sock_recv(self._sock, _RECV)
        except OSError as e:
            raise SessionDied(f"shell socket error: {e}") from e
        if not data:
            raise SessionDied("the shell's stream ended")
        if len(data) >= _DRAIN_FROM:  # bulk output: take what else has arrived, one wakeup
            chunks = [data]
            try:
                while sum(map(len, chunks)) < _RECV * 16 and (more := self._sock.recv(_RECV)):
                    chunks.append(more)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError as e:
                raise SessionDied(f"shell socket error: {e}") from e
            data = b"".join(chunks)  # (end of stream after data: the next call reports it)
        return data

    async def _send(self, data: bytes) -> None:
        if self._sock is None:
            raise SessionDied("the session is closed")
        try:
            await asyncio.get_running_loop().sock_sendall(self._sock, data)
        except OSError as e:
            raise SessionDied(f"shell socket error: {e}") from e

    async def _send_kill(
        self,
        targets: str,
        wait_ack: bool = False,
        killer: socket.socket | None = None,
        timeout_s: float | None = None,
    ) -> str:
        """A request to the killer (`killer`, default the session's; see `shell.KILLER`;
        drains earlier answers first); with `wait_ack`, returns its answer once the kill was
        done (`SessionDied` if none comes within `timeout_s`, default `kill_grace_s`)."""
        killer = killer or self._killer
        if killer is None:
            raise SessionDied("the session is closed")
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    if not killer.recv(_RECV):
                        raise SessionDied("the killer shell ended")
                except BlockingIOError:
                    break
            await loop.sock_sendall(killer, f"{targets}\n".encode())
            if not wait_ack:
                return ""
            demux, answers = self._new_demux(), b""
            async with asyncio.timeout(timeout_s or self.kill_grace_s):
                while not answers.endswith(b"\n"):
                    chunk = await loop.sock_recv(killer, _RECV)
                    if not chunk:
                        raise SessionDied("the killer shell ended")
                    answers += b"".join(p for _, p in demux.feed(chunk))
            return answers.decode()[-2]
        except TimeoutError:  # (an OSError too)
            raise SessionDied(f"the killer did not answer {targets!r} in time") from None
        except OSError as e:
            raise SessionDied(f"killer socket error: {e}") from e
