"""One bubblewrap sandbox: a bwrap whose PID 1 lives `<lifetime>`, entered with nsenter.

    box = await Box.start(image_entry, spec)        # namespaces up, writable copies made
    proc = box.popen(["bash"], stdin=s, stdout=s)   # a process inside (like `docker exec`)
    rc, out, err = await box.exec_once("git status", timeout_s=30)
    await box.close()                               # kills everything, removes the copies

Isolation: own user/PID/mount/IPC/UTS/network namespaces (`--unshare-all`: only `lo`), the
image's root filesystem read-only, the workdir and the agent's home as writable per-sandbox
copies, a tmpfs `/tmp`, uid/gid 1000 inside, no capabilities, a new session, `--die-with-parent`
(the farm's death ends the sandbox). Limits are rlimits set on every process that enters
(`prlimit`): RLIMIT_AS (memory_mb), RLIMIT_NPROC (pids_limit; per sandbox, since each runs as
its own host uid when swefleet is root, or is counted in the sandbox's own user namespace when
not), RLIMIT_FSIZE (max_file_mb), RLIMIT_NOFILE (nofile). Not root: sandboxes run in the
caller's unprivileged user namespaces (where the kernel allows them), uid 1000 inside as well.
No cgroup is used: CPU quota and a whole-sandbox memory cap are not enforced.
When PID 1 ends (lifetime, `close`) the kernel kills every process of the namespace.
"""

from __future__ import annotations

import asyncio
import fcntl
import functools
import itertools
import json
import math
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from swefleet.envs.bwrap.rootfs import default_dir, image_env, writable_copy
from swefleet.envs.config import BwrapConfig, SandboxLimits
from swefleet.envs.protocol import InfraError

AGENT_ID = 1000
HOME = "/home/agent"
#: PID 1 of the box: immune to the agent's signals (init of its PID namespace), reaps orphans
#: (bash reaps every child on SIGCHLD), ends after the lifetime or when its stdin, a pipe from
#: the farm, closes (the farm died): the kernel then kills every process of the namespace.
#: (Every 0.2 s it forks a no-op: bash then reaps with waitpid(-1), adopted orphans too, so
#: killed processes stop counting against RLIMIT_NPROC soon.)
_PID1 = ["bash", "--noprofile", "--norc", "-c",
         'while (( SECONDS < $0 )); do read -r -t 0.2 _; (( $? > 128 )) || exit 0; (:); done']
#: Environment every box starts with (the image's own ENV overrides it). glibc reserves 64 MiB
#: of address space per malloc arena and allows 8 arenas a core: a threaded test suite on a
#: many-core host then runs out of RLIMIT_AS (`memory_mb`) with little memory in use
#: (`MemoryError`, "can't start new thread"). Docker's cgroup cap counts used memory only.
BOX_ENV = {"MALLOC_ARENA_MAX": "2"}
_uids = itertools.count()
_live_uids: set[int] = set()
_swept: set[Path] = set()


class BwrapMissing(InfraError):
    """bubblewrap (or nsenter/prlimit/setpriv) is not installed, or cannot make namespaces."""


def bwrap_exe(path: str = "") -> str:
    """`BwrapConfig.bwrap_path`, or `bwrap` from `PATH`."""
    return path or "bwrap"


#: bwrap executables whose namespace probe passed (probed once per process).
_probed: set[str] = set()
#: Probe runs before bwrap counts as unable to make namespaces: binding the host's `/` fails
#: now and then while Docker mounts or unmounts a container's files (`Can't bind mount
#: /oldroot/ ... Invalid argument` on a container's `resolv.conf`).
PROBE_ATTEMPTS = 3


def check_tools(bwrap: str = "") -> None:
    """`BwrapMissing` unless the tools exist and bwrap can make its namespaces here (as root,
    or as this user where the kernel allows unprivileged user namespaces); a passed probe is
    not run again for the same executable."""
    exe = bwrap_exe(bwrap)
    if exe in _probed:
        return
    missing = [t for t in (exe, "nsenter", "prlimit", "setpriv") if shutil.which(t) is None]
    if missing:
        raise BwrapMissing(f"the bwrap backend needs {', '.join(missing)} (apt-get install "
                           "bubblewrap util-linux, or [envs.bwrap] bwrap_path)")
    for attempt in range(PROBE_ATTEMPTS):
        probe = subprocess.run([exe, "--unshare-all", "--unshare-user", "--die-with-parent",
                                "--ro-bind", "/", "/", "true"],
                               capture_output=True, text=True, timeout=30, check=False)
        if probe.returncode == 0:
            _probed.add(exe)
            return
        time.sleep(0.2 * (attempt + 1))
    # e.g. user namespaces disabled by the kernel or a seccomp policy
    why = (probe.stderr.strip().splitlines() or ["no error text"])[-1]
    who = "" if os.getuid() == 0 else (
        f" (not root: uid {os.getuid()} needs unprivileged user namespaces, e.g. sysctl "
        "kernel.unprivileged_userns_clone=1 / kernel.apparmor_restrict_unprivileged_userns=0)")
    raise BwrapMissing(f"bwrap cannot create its namespaces on this machine{who}: {why}")


def _host_uid(cfg: BwrapConfig) -> int:
    if os.getuid() != 0:  # not root: every sandbox runs as the caller (in its own user ns)
        return os.getuid()
    for _ in range(100000):
        uid = cfg.host_uid_base + (os.getpid() % 512) * 1000 + next(_uids) % 1000
        if uid not in _live_uids:
            _live_uids.add(uid)
            return uid
    raise InfraError("no free host uid for a sandbox")


@dataclass
class Box:
    entry: Path
    workdir: str
    limits: SandboxLimits
    env: dict[str, str]
    uid: int
    dir: Path
    init: asyncio.subprocess.Process | None = None
    pid: int = 0
    procs: list[subprocess.Popen] = field(default_factory=list)
    closed: bool = False
    made: bool = False
    bwrap: str = "bwrap"
    outer_ns: int = -1  # not root: an fd of the user namespace bwrap set the box up in

    @classmethod
    async def start(cls, entry: Path, workdir: str, limits: SandboxLimits, cfg: BwrapConfig,
                    session_env: dict[str, str], name: str) -> Box:
        """Copy the writable paths and start PID 1; cancellation-safe."""
        check_tools(cfg.bwrap_path)
        base = Path(cfg.state_dir) if cfg.state_dir else default_dir("sandboxes")
        base.mkdir(parents=True, exist_ok=True, mode=0o755)
        if base not in _swept:  # copies that a killed process left behind
            _swept.add(base)
            await asyncio.to_thread(sweep_dead, base)
        env = {**BOX_ENV, **image_env(entry), "HOME": HOME, "USER": limits.user, **session_env}
        box = cls(entry, workdir, limits, env, _host_uid(cfg), base / f"{os.getpid()}.{name}",
                  bwrap=bwrap_exe(cfg.bwrap_path))
        try:
            await asyncio.to_thread(box._prepare)
            await box._start_init()
        except BaseException:
            await asyncio.shield(box.close())
            raise
        return box

    def _prepare(self) -> None:
        self.dir.mkdir(mode=0o755)
        self.made = True
        writable_copy(self.entry, self.workdir, self.dir / "work", self.uid)
        writable_copy(self.entry, HOME, self.dir / "home", self.uid)

    def _rlimits(self, nproc: bool = True) -> list[str]:
        lim = self.limits
        return ["prlimit", f"--as={lim.memory_mb << 20}",
                *([f"--nproc={lim.pids_limit}"] if nproc else []),
                f"--fsize={lim.max_file_mb << 20}", f"--nofile={lim.nofile}", "--"]

    def _init_prefix(self) -> list[str]:
        """Root: drop to the sandbox's own host uid (RLIMIT_NPROC then counts this sandbox).
        Not root: stay this user; bwrap itself gets no RLIMIT_NPROC (it would cap the whole
        user's processes, swefleet's threads included, via the new user namespace's count);
        processes entered with nsenter still get it, counted within the sandbox's namespace."""
        if os.getuid() == 0:
            return ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups",
                    "--pdeathsig", "KILL", *self._rlimits()]
        return ["setpriv", "--pdeathsig", "KILL", *self._rlimits(nproc=False)]

    def _bwrap(self, bind: str) -> list[str]:
        """bwrap with the box's namespaces, root, fresh /tmp, and its workdir and home bound
        with `bind` (`--bind`, or `--ro-bind`); `--pdeathsig` in the prefix: the farm's death
        kills bwrap, bwrap's `--die-with-parent` the sandbox."""
        tmp_mb = self.limits.tmpfs_mb or 1024
        return [
            *self._init_prefix(),
            self.bwrap, "--unshare-all", "--unshare-user", "--die-with-parent", "--new-session",
            "--cap-drop", "ALL", "--uid", str(AGENT_ID), "--gid", str(AGENT_ID),
            "--hostname", "sandbox", "--ro-bind", str(self.entry / "rootfs"), "/",
            "--proc", "/proc", "--dev", "/dev", "--size", str(tmp_mb << 20), "--tmpfs", "/tmp",
            bind, str(self.dir / "work"), self.workdir, bind, str(self.dir / "home"), HOME,
        ]

    async def _start_init(self) -> None:
        argv = [
            *self._bwrap("--bind"), "--chdir", self.workdir, "--info-fd", "{info}",
            "--as-pid-1", "--", *_PID1, str(math.ceil(self.limits.lifetime_s)),
        ]
        r, w = os.pipe()
        argv = [str(w) if a == "{info}" else a for a in argv]
        try:
            self.init = await asyncio.create_subprocess_exec(
                *argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE, pass_fds=(w,),
            )
        finally:
            os.close(w)
        with os.fdopen(r, "rb", buffering=0) as info:
            text = await asyncio.to_thread(_read_json, info)
        if text is None:
            err = await self.init.stderr.read() if self.init.stderr else b""
            raise InfraError(f"bwrap did not start: {err.decode(errors='replace')[-1000:]}")
        try:
            self.pid = await _payload_pid(text["child-pid"])
        except InfraError as e:
            err = await self.init.stderr.read() if self.init.stderr else b""
            raise InfraError(f"{e} {err.decode(errors='replace')[-1000:]}".strip()) from e
        if os.getuid() != 0:
            self.outer_ns = _outer_userns(self.pid)

    def argv(self, command: list[str], cwd: str | None = None) -> list[str]:
        """Host argv that runs `command` inside (clean environment, cwd = workdir)."""
        env = [f"{k}={v}" for k, v in self.env.items()]
        return [
            *self._rlimits(), *self._enter(),
            "/usr/bin/env", "-i", *env, "/bin/sh", "-c", 'cd "$0" && exec "$@"',
            cwd or self.workdir, *command,
        ]

    def read_only_argv(self, command: list[str], cwd: str | None = None) -> list[str]:
        """Host argv that runs `command` in a one-shot sandbox beside the box: the same root,
        namespaces, environment and limits, the box's workdir and home bound read-only, a
        /tmp of its own, no further user namespaces (where bwrap can forbid them: one would
        let the process mount over the read-only tree). Every process it starts ends with
        `command` (bwrap's PID 1 does)."""
        env = [f"{k}={v}" for k, v in self.env.items()]
        nproc = [] if os.getuid() == 0 else [  # not root: bwrap itself runs without it
            "bash", "-c", 'ulimit -u "$0" && exec "$@"', str(self.limits.pids_limit)]
        return [*self._bwrap("--ro-bind"), *_no_userns(self.bwrap), "--chdir",
                cwd or self.workdir, "--", "/usr/bin/env", "-i", *env, *nproc, *command]

    def _enter(self) -> list[str]:
        """nsenter argv into the box as uid/gid 1000. Root may join the namespaces in any
        order. Not root: bwrap nests the box's user namespace (uid 1000 inside) in the one
        that owns the other namespaces; an unprivileged caller can only join those from that
        outer one, then the inner one (a second nsenter, inside, targeting PID 1)."""
        if os.getuid() == 0:
            return ["nsenter", "-t", str(self.pid), "-U", "-p", "-m", "-n", "-i", "-u",
                    "-S", str(AGENT_ID), "-G", str(AGENT_ID), "--"]
        return ["nsenter", f"--user=/proc/{os.getpid()}/fd/{self.outer_ns}", "-t", str(self.pid),
                "-p", "-m", "-n", "-i", "-u", "--preserve-credentials", "--",
                "nsenter", "-t", "1", "-U", "--preserve-credentials", "--"]

    def popen(self, command: list[str], *, stdin: int, stdout: int, stderr: int | None = None
              ) -> subprocess.Popen:
        """Start `command` inside (stderr appended to `<dir>/stderr.log` unless given); the
        process is reaped at `close`."""
        if self.closed:
            raise InfraError("sandbox is closed")
        self.procs = [p for p in self.procs if p.poll() is None]
        with open(self.dir / "stderr.log", "ab") as log:  # (outside the box)
            proc = subprocess.Popen(self.argv(command), stdin=stdin, stdout=stdout,
                                    stderr=log if stderr is None else stderr,
                                    start_new_session=True)
        self.procs.append(proc)
        return proc

    async def exec_once(self, script: str, timeout_s: float, stdin: bytes | None = None
                        ) -> tuple[int, bytes, bytes, bool]:
        """`bash -c script` inside under `timeout -s KILL`: (rc, stdout, stderr, timed_out)."""
        if self.closed:
            raise InfraError("sandbox is closed")
        argv = self.argv(["timeout", "-s", "KILL", str(math.ceil(timeout_s)), "bash", "-c",
                          script])
        started = time.monotonic()
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            async with asyncio.timeout(timeout_s + 10):  # backstop: `timeout` did not end it
                out, err = await proc.communicate(stdin)
        except BaseException:
            proc.kill()
            await asyncio.shield(proc.wait())
            raise
        rc = proc.returncode if proc.returncode is not None else -1
        return rc, out, err, rc == 137 and time.monotonic() - started >= timeout_s

    def orphan_count(self) -> int:
        """Children of PID 1 (orphans it adopted, e.g. a fork bomb's): one small read."""
        try:
            return len(Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text().split())
        except OSError:
            return 0

    def process_count(self) -> int:
        """Processes in the box's PID namespace (a scan of the host's /proc)."""
        try:
            ns = os.readlink(f"/proc/{self.pid}/ns/pid")
        except OSError:
            return 0
        n = 0
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    n += os.readlink(f"/proc/{entry.name}/ns/pid") == ns
                except OSError:
                    pass
        return n

    def alive(self) -> bool:
        return self.init is not None and self.init.returncode is None and not self.closed

    def kill(self) -> None:
        """Kill the box now, from any thread: bwrap, and with it PID 1 (`--die-with-parent`)
        and the whole namespace; `close` still reaps and removes the copies."""
        if self.init is not None and self.init.returncode is None:
            try:
                os.kill(self.init.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    async def close(self) -> None:
        """Kill PID 1 (the kernel then kills the whole namespace), reap, remove the copies."""
        if self.closed:
            return
        self.closed = True
        if self.init is not None and self.init.returncode is None:
            self.init.kill()
            await self.init.wait()
        for _ in range(500):  # PID 1 goes last, once the kernel killed the whole namespace
            if self.pid == 0 or _exited(self.pid):
                break
            await asyncio.sleep(0.005)
        for proc in self.procs:
            try:
                await asyncio.to_thread(proc.wait, 10)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.procs.clear()
        if self.made:
            await asyncio.to_thread(shutil.rmtree, self.dir, True)
        if os.getuid() == 0:
            _live_uids.discard(self.uid)
        if self.outer_ns >= 0:
            os.close(self.outer_ns)
            self.outer_ns = -1


@functools.cache
def _no_userns(bwrap: str) -> tuple[str, ...]:
    """`--disable-userns` where this bwrap has it (0.8 and later), else nothing."""
    try:
        usage = subprocess.run([bwrap, "--help"], capture_output=True, text=True, timeout=30,
                               check=False).stdout
    except OSError:
        return ()
    return ("--disable-userns",) if "--disable-userns" in usage else ()


def _exited(pid: int) -> bool:
    """Whether `pid` has ended: gone, or a zombie. A namespace's PID 1 becomes a zombie only
    after the kernel has killed and reaped every other process of its namespace; its outer
    bwrap is dead by then, so the zombie waits for the host's init to reap it, which can take
    seconds (1-2 s per sandbox on some hosts: most of a grade's time)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return stat.rpartition(b")")[2].split()[:1] in ([b"Z"], [b"X"])


def _outer_userns(pid: int) -> int:
    """An fd of the parent of `pid`'s user namespace (ioctl NS_GET_PARENT)."""
    inner = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    try:
        return fcntl.ioctl(inner, 0xB702)  # NS_GET_PARENT; the new fd is close-on-exec
    except OSError as e:
        raise InfraError(f"cannot reach the sandbox's outer user namespace: {e}") from e
    finally:
        os.close(inner)


def _read_json(f) -> dict | None:
    """bwrap's `--info-fd` document (read until it parses; None at end of stream)."""
    buf = b""
    while chunk := f.read(4096):
        buf += chunk
        try:
            return json.loads(buf)
        except ValueError:
            continue
    return None


async def _payload_pid(child: int, wait_s: float = 10.0) -> int:
    """`child` (bwrap's sandboxed process) once it runs PID 1's bash: its namespaces, the uid
    map included, are final then, and nsenter may join them."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{child}/comm").read_text().strip() == "bash":
                return child
        except OSError as e:
            raise InfraError(f"bwrap ended during start-up: {e}") from e
        await asyncio.sleep(0.002)
    raise InfraError(f"bwrap did not start its payload in {wait_s} s")


def sweep_dead(base: Path) -> list[Path]:
    """Remove the sandbox directories (`<owner pid>.<name>`) whose owner process is gone."""
    removed = []
    for d in base.iterdir():
        pid = d.name.partition(".")[0]
        if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
    return removed
