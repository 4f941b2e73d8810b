"""`DockerSandbox`: one hardened container with a persistent shell session (the `Sandbox` protocol).

    async with await DockerSandbox.create(client, image, run_id="r1", config=cfg) as sb:
        result = await sb.run("cd src && pytest -x", timeout_s=60)
        patch = await sb.diff()

The container's PID 1 is `sleep <lifetime>` under tini, so it ends and is removed by itself;
`close()` removes it earlier. Docker and container failures raise `InfraError` subclasses, never
a failed `CommandResult`; a missing file is the agent's business (`FileNotFoundError`). Once the
farm's disk watchdog has removed the sandbox (`kill_over_budget`), every operation raises
`DiskBudgetExceeded` instead, the one in flight included; once the farm drained its Docker host
(`mark_host_lost`), every operation raises `HostLost`, an `InfraError`.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import posixpath
import re
import shlex
import socket
import time
import uuid
from collections.abc import Callable
from typing import Any, Self

from swefleet.envs import containers
from swefleet.envs.config import FarmConfig, SandboxLimits
from swefleet.envs.protocol import CommandResult, DiskBudgetExceeded, InfraError, RepositoryBroken
from swefleet.envs.session import SessionDied, ShellSession

log = logging.getLogger(__name__)

#: Files that `diff()` never reports (caches written by running the tests).
DIFF_EXCLUDES = (
    ":(exclude,glob)**/__pycache__/**",
    ":(exclude,glob)**/*.pyc",
    ":(exclude,glob)**/.pytest_cache/**",
)


class DockerError(InfraError):
    """The Docker daemon failed a request (after the caller's retries)."""


class ImageMissing(InfraError):
    """The image does not exist locally (swefleet never pulls); retrying will not help."""


class ContainerDied(InfraError):
    """The sandbox's container is gone or stopped (lifetime over, OOM of PID 1, removed)."""


class HostLost(InfraError):
    """The sandbox's Docker host was drained (its engine failed): the episode cannot go on."""


class PatchTooLarge(DiskBudgetExceeded):
    """The files the agent changed hold more than `FarmConfig.patch_max_bytes`: no patch is
    made. The agent's doing (a `DiskBudgetExceeded`, so the episode ends with `limit_disk`)."""


def _docker_errors() -> tuple[type[BaseException], ...]:
    import docker.errors
    import requests.exceptions

    return (
        docker.errors.APIError,
        docker.errors.DockerException,
        requests.exceptions.RequestException,
    )


class DockerSandbox:
    """A running container plus its shell session. Create with `DockerSandbox.create`."""

    def __init__(
        self,
        client: Any,
        container_id: str,
        *,
        image: str,
        limits: SandboxLimits,
        config: FarmConfig,
        workdir: str,
    ) -> None:
        self.client = client
        self.container_id = container_id
        self.image = image
        self.limits = limits
        self.config = config
        self.workdir = workdir
        self.created = time.monotonic()
        self.closed = False
        self.over_budget = ""
        """Why the disk watchdog removed this sandbox; empty while it has not."""
        self.host: Any = None
        """The farm's `envs.hosts.Host` this sandbox runs on (None outside a farm)."""
        self.host_lost = ""
        """Why the farm gave this sandbox's host up (`mark_host_lost`); empty while it has not."""
        self.image_user = ""
        """How the farm ran the task image (`envs.derived_image.Prepared.how`: `agent`,
        `derived` or `image`); empty outside a farm."""
        self.on_engine_error: Callable[[BaseException], None] | None = None
        """Told about every Docker error of an operation (the farm judges the host's health)."""
        self.session = ShellSession(
            self._open_exec,
            start_timeout_s=config.session_start_timeout_s,
            kill_grace_s=config.kill_grace_s,
        )

    # -- lifecycle -------------------------------------------------------------------------

    @classmethod
    async def create(
        cls,
        client: Any,
        image: str,
        *,
        run_id: str,
        config: FarmConfig,
        limits: SandboxLimits | None = None,
        workdir: str = "/testbed",
        instance_id: str = "",
    ) -> DockerSandbox:
        """Start a container and its shell. Cancellation-safe: nothing is left running."""
        limits = limits or config.limits
        labels = containers.sandbox_labels(run_id, limits.lifetime_s, instance_id)
        kwargs = containers.run_kwargs(image, limits, labels)
        started = asyncio.ensure_future(asyncio.to_thread(_run_container, client, kwargs))
        try:
            container_id = await asyncio.shield(started)
        except asyncio.CancelledError:
            started.add_done_callback(lambda f: _remove_later(client, f))
            raise
        except _docker_errors() as e:
            import docker.errors

            if isinstance(e, docker.errors.ImageNotFound):
                raise ImageMissing(f"image {image} not found (swefleet never pulls)") from e
            raise DockerError(f"create {image}: {type(e).__name__}: {e}") from e
        sb = cls(client, container_id, image=image, limits=limits, config=config, workdir=workdir)
        try:
            async with asyncio.timeout(config.session_start_timeout_s):
                await sb.session.start()
        except BaseException as e:
            await asyncio.shield(sb.close())
            if isinstance(e, (SessionDied, TimeoutError, *_docker_errors())):
                raise InfraError(f"shell did not start in {image}: {type(e).__name__}: {e}") from e
            raise
        return sb

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.shield(self.close())

    async def close(self) -> None:
        """Close the session and remove the container (idempotent)."""
        if self.closed:
            return
        self.closed = True
        await self.session.close()
        try:
            await asyncio.to_thread(containers.remove_container, self.client, self.container_id)
        except _docker_errors() as e:
            raise DockerError(f"remove {self.container_id[:12]}: {e}") from e

    async def kill_over_budget(self, reason: str) -> None:
        """The disk watchdog's verdict: remember `reason` and remove the container now (frees its
        disk); running and later operations raise `DiskBudgetExceeded`. Idempotent."""
        if self.over_budget or self.closed:
            return
        self.over_budget = reason
        log.info("sandbox %s removed: %s", self.container_id[:12], reason)
        try:
            await asyncio.to_thread(containers.remove_container, self.client, self.container_id)
        except _docker_errors() as e:
            raise DockerError(f"remove {self.container_id[:12]}: {e}") from e

    def mark_host_lost(self, reason: str) -> None:
        """The farm drained this sandbox's host: running and later operations raise `HostLost`
        (the shell's sockets are shut down, so a command in flight ends now). Idempotent."""
        if self.host_lost or self.closed:
            return
        self.host_lost = reason or "host lost"
        for sock in (getattr(self.session, "_sock", None), getattr(self.session, "_killer", None)):
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _engine_error(self, what: str, e: BaseException) -> DockerError:
        """A `DockerError` for `e`, after telling `on_engine_error`."""
        if self.on_engine_error is not None:
            self.on_engine_error(e)
        where = f"[host {self.host.name}] " if self.host is not None else ""
        return DockerError(f"{where}{what}{type(e).__name__}: {e}")

    def _check_budget(self, cause: BaseException | None = None) -> None:
        """Raise `HostLost` if the farm gave the host up, `DiskBudgetExceeded` if the watchdog
        removed this sandbox (both from `cause`)."""
        if self.host_lost:
            raise HostLost(f"the Docker host of this sandbox was drained: {self.host_lost}") \
                from cause
        if self.over_budget:
            raise DiskBudgetExceeded(self.over_budget) from cause

    async def _open_exec(self, argv: list[str]) -> Any:
        return await asyncio.to_thread(
            containers.open_exec_socket,
            self.client,
            self.container_id,
            argv,
            user=self.limits.user,
            workdir=self.workdir,
            env={"USER": self.limits.user, **self.config.session_env},
        )

    async def is_running(self) -> bool:
        import docker.errors

        try:
            info = await asyncio.to_thread(self.client.api.inspect_container, self.container_id)
        except docker.errors.NotFound:
            return False
        except _docker_errors() as e:
            self._check_budget(e)
            raise self._engine_error("inspect: ", e) from e
        return bool(info["State"]["Running"])

    # -- commands --------------------------------------------------------------------------

    async def run(self, command: str, timeout_s: float | None = None) -> CommandResult:
        """Run in the persistent shell (cwd/env persist). Timeout -> killed, `exit_code` None."""
        return await self._run(command, timeout_s, self.config.output_max_bytes, persist=True)

    async def _run(
        self,
        command: str,
        timeout_s: float | None,
        max_bytes: int,
        persist: bool,
    ) -> CommandResult:
        self._check_budget()
        if self.closed:
            raise InfraError("sandbox is closed")
        timeout = timeout_s if timeout_s is not None else self.config.command_timeout_s
        try:
            try:
                return await self.session.run(
                    command, timeout, max_bytes, self.config.output_kill_bytes, persist=persist
                )
            except SessionDied as e:
                return await self._after_shell_died(e)
            except _docker_errors() as e:
                raise self._engine_error("", e) from e
        except InfraError as e:  # the watchdog (or a drain) removed the container under it
            self._check_budget(e)
            raise

    async def _after_shell_died(self, e: SessionDied) -> CommandResult:
        """The shell ended mid-command: infra if the container is gone, else a fresh shell."""
        self._check_budget(e)
        if not await self.is_running():
            raise ContainerDied(f"container {self.container_id[:12]} is gone: {e}") from e
        log.info("shell of %s ended (%s); restarting it", self.container_id[:12], e)
        try:
            await self.session.restart()
        except (SessionDied, TimeoutError, *_docker_errors()) as err:
            raise InfraError(f"shell could not be restarted: {type(err).__name__}: {err}") from err
        partial = e.partial or CommandResult(output="", exit_code=-1)
        note = "[swefleet: the shell ended; a new shell was started, cwd/env reset]"
        sep = "" if not partial.output or partial.output.endswith("\n") else "\n"
        return partial.model_copy(update={"output": partial.output + sep + note, "exit_code": -1})

    async def exec(
        self,
        script: str,
        timeout_s: float = 60.0,
        user: str | None = None,
    ) -> CommandResult:
        """Run `bash -c script` in a fresh exec (clean env, cwd = workdir), outside the session.

        `output` is stdout followed by stderr."""
        out, err, rc, timed_out, took = await self._exec_raw(script, timeout_s, user)
        return CommandResult(
            output=(out + err).decode("utf-8", errors="replace"),
            exit_code=None if timed_out else rc,
            timed_out=timed_out,
            duration_s=took,
        )

    async def _exec_raw(
        self,
        script: str,
        timeout_s: float,
        user: str | None = None,
    ) -> tuple[bytes, bytes, int, bool, float]:
        self._check_budget()
        start = time.monotonic()
        try:
            rc, out, err = await asyncio.to_thread(
                containers.exec_once,
                self.client,
                self.container_id,
                script,
                user=user or self.limits.user,
                workdir=self.workdir,
                env=self.config.session_env,
                timeout_s=timeout_s,
            )
        except _docker_errors() as e:
            await self._raise_if_dead(e)
            raise self._engine_error("exec: ", e) from e
        self._check_budget()  # removed while it ran: the output is not the command's
        took = time.monotonic() - start
        return out, err, rc, rc == 137 and took >= timeout_s, took

    async def _raise_if_dead(self, cause: BaseException) -> None:
        self._check_budget(cause)
        if not await self.is_running():
            raise ContainerDied(f"container {self.container_id[:12]} is gone") from cause

    # -- files -----------------------------------------------------------------------------

    def _abs(self, path: str) -> str:
        """`path` made absolute; `OSError` (EILSEQ) if it cannot travel over Docker's API (a
        lone surrogate, e.g. from a `\\ud800` escape in a tool call)."""
        try:
            path.encode()
        except UnicodeEncodeError as e:
            raise OSError(errno.EILSEQ, f"the path is not valid UTF-8 text: {e.reason}") from None
        return posixpath.normpath(posixpath.join(self.workdir, path))

    async def read_file(self, path: str) -> bytes:
        """Bytes of a file (relative paths are relative to the workdir); follows symlinks.
        A file over `FarmConfig.read_file_max_bytes` raises `OSError` (EFBIG) unread."""
        import docker.errors

        self._check_budget()
        target = self._abs(path)
        for _ in range(8):
            try:
                tar, stat = await asyncio.to_thread(
                    containers.get_archive_capped,
                    self.client,
                    self.container_id,
                    target,
                    self.config.read_file_max_bytes,
                )
                if tar is None:
                    raise _too_big_to_read(target, stat, self.config.read_file_max_bytes)
                return await asyncio.to_thread(containers.untar_one_file, tar, target)
            except containers.SymlinkFound as link:
                target = posixpath.normpath(posixpath.join(posixpath.dirname(target), link.args[0]))
            except docker.errors.NotFound as e:
                await self._raise_if_dead(e)
                raise FileNotFoundError(target) from e
            except _docker_errors() as e:
                self._check_budget(e)
                raise self._engine_error(f"read {target}: ", e) from e
        raise OSError(f"too many levels of symbolic links: {path}")

    async def write_file(self, path: str, data: bytes, mode: int | None = None) -> None:
        """Write a file owned by the sandbox user; parent directories are created. An existing
        file keeps its mode unless `mode` is given (an edited script stays executable); a new
        one gets `mode`, else 0o644."""
        import docker.errors

        self._check_budget()
        target = self._abs(path)
        parent, name = posixpath.split(target)
        if mode is None:
            mode = await self._mode_of(target)
        tar = containers.tar_one_file(name, data, self.session.uid, self.session.gid, mode)
        for attempt in range(2):
            try:
                ok = await asyncio.to_thread(
                    self.client.api.put_archive, self.container_id, parent, tar
                )
                if not ok:
                    raise DockerError(f"write {target}: put_archive refused")
                return
            except docker.errors.NotFound as e:
                await self._raise_if_dead(e)
                if attempt:
                    raise FileNotFoundError(parent) from e
                made = await self.exec(f"mkdir -p -- {shlex.quote(parent)}", timeout_s=30)
                if made.exit_code != 0:
                    raise PermissionError(f"cannot create {parent}: {made.output.strip()}") from e
            except _docker_errors() as e:
                self._check_budget(e)
                raise self._engine_error(f"write {target}: ", e) from e

    async def _mode_of(self, target: str) -> int:
        """The permission bits of the existing file `target`; 0o644 when there is none."""
        r = await self.exec(f"stat -c %a -- {shlex.quote(target)} 2>/dev/null", timeout_s=30)
        text = r.output.strip()
        return int(text, 8) if r.exit_code == 0 and text.isdigit() else 0o644

    async def apply_patch(self, patch: str, timeout_s: float = 60.0) -> CommandResult:
        """Apply a unified diff in the workdir: `git apply`, falling back to `patch --fuzz`.

        Returns the result of the last attempt; `exit_code == 0` means applied."""
        path = f"/tmp/swefleet-{uuid.uuid4().hex}.patch"
        await self.write_file(path, patch.encode(), mode=0o644)  # a new file: no mode to keep
        q = shlex.quote(path)
        script = (
            f"git apply --verbose {q} || git apply --verbose --3way {q} "
            f"|| patch --batch --forward --fuzz=5 -p1 -i {q}; rc=$?; rm -f {q}; exit $rc"
        )
        return await self.exec(script, timeout_s=timeout_s)

    async def diff(self) -> str:
        """Patch of the workdir against its state at start-up, new files included.

        Uses a throw-away index, so the agent's index and session are untouched. Files whose
        old or new content is not UTF-8 (a Latin-1 source, say) are diffed as binary: as text
        their bytes would become replacement characters, and the patch would not apply."""
        out = await self._git_diff("git diff --cached --no-color --binary {base}")
        try:
            return out.decode("utf-8")
        except UnicodeDecodeError:
            out = await self._git_diff(_DIFF_NON_UTF8_AS_BINARY)
            return out.decode("utf-8", errors="replace")  # (an attribute forced `diff`)

    async def _git_diff(self, command: str) -> bytes:
        """Stage everything in a throw-away index, then run `command` (`{base}`: the commit at
        start-up); its stdout."""
        base = self.session.head_commit or "HEAD"
        excludes = " ".join(shlex.quote(x) for x in DIFF_EXCLUDES)
        script = (
            "set -e; export GIT_INDEX_FILE=/tmp/.swefleet-index-$$; tmp=/tmp/.swefleet-diff-$$; "
            "trap 'rm -f \"$GIT_INDEX_FILE\" \"$tmp\" \"$tmp.attr\"' EXIT; "
            'cp "$(git rev-parse --git-dir)/index" "$GIT_INDEX_FILE" 2>/dev/null || true; '
            f"git add -A -- . {excludes}; "
            + _CHANGED_SIZE_CHECK.replace("{limit}", str(self.config.patch_max_bytes))
            + command
        ).replace("{base}", base)
        out, err, rc, _, _ = await self._exec_raw(script, 120)
        if rc != 0:
            text = err.decode(errors="replace")
            if m := re.search(r"swefleet-changed-bytes:(\d+)", text):
                raise PatchTooLarge(
                    f"the files changed in the sandbox hold {int(m[1]) / 2**20:.1f} MiB, over "
                    f"patch_max_bytes ({self.config.patch_max_bytes / 2**20:.1f} MiB): no patch"
                )
            if rc in _KILLED:  # git was killed (memory limit, the daemon): not the repository
                raise InfraError(f"git diff killed ({rc}): {text[-2000:]}")
            # the container ran the script and git refused: the repository is the agent's doing
            raise RepositoryBroken(f"git diff failed ({rc}): {text[-2000:]}")
        return out


#: Exit codes of a shell whose command died by SIGKILL / SIGTERM / SIGSEGV / SIGBUS.
_KILLED = frozenset({137, 143, 139, 135})

#: Sum of the new blobs' sizes (from `git diff --raw -z`: metadata records start with `:`);
#: over `{limit}` it says so on stderr and fails before the diff reads any of them.
_CHANGED_SIZE_CHECK = r"""
n=$(git diff --cached --raw -z --no-abbrev {base} | tr '\0' '\n' | awk '/^:/ {print $4}' |
    git cat-file --batch-check='%(objectsize)' | awk '$1 ~ /^[0-9]+$/ {s += $1} END {print s + 0}')
if (( n > {limit} )); then echo "swefleet-changed-bytes:$n" >&2; exit 3; fi
"""

#: The changed files whose old or new blob has a line that is not UTF-8 (`grep -axv '.*'`),
#: diffed apart with the `binary` attribute; every other file as text (paths from the top).
_DIFF_NON_UTF8_AS_BINARY = r"""
git diff --cached --name-only -z {base} | while IFS= read -r -d '' f; do
  if { git cat-file blob ":$f"; git cat-file blob "{base}:$f"; } 2>/dev/null |
     LC_ALL=C.UTF-8 grep -qaxv '.*'; then printf '%s\0' "$f"; fi
done >"$tmp"
mapfile -d '' -t bad <"$tmp"; ex=(); for f in "${bad[@]}"; do ex+=(":(top,exclude,literal)$f"); done
git diff --cached --no-color --binary {base} -- ':(top)' "${ex[@]}"
if (( ${#bad[@]} )); then
  printf '* binary\n' >"$tmp.attr"
  git -c core.attributesFile="$tmp.attr" diff --cached --no-color --binary {base} -- \
    "${bad[@]/#/:(top,literal)}"
fi
"""


def _too_big_to_read(target: str, stat: dict[str, Any], limit: int) -> OSError:
    return OSError(
        errno.EFBIG,
        f"{target} is {stat.get('size')} bytes, over the {limit}-byte limit of reading a whole "
        "file; look at parts of it with shell commands (head, tail, sed -n, grep)",
    )


def _run_container(client: Any, kwargs: dict[str, Any]) -> str:
    """Create and start (never `containers.run`: it pulls missing images)."""
    container = client.containers.create(**kwargs)
    try:
        container.start()
    except BaseException:
        containers.remove_container(client, container.id)
        raise
    return container.id


def _remove_later(client: Any, fut: asyncio.Future[str]) -> None:
    """Done-callback of a creation whose caller was cancelled: remove what it made."""
    if fut.cancelled() or fut.exception() is not None:
        return
    asyncio.ensure_future(asyncio.to_thread(containers.remove_container, client, fut.result()))
