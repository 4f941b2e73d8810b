"""Many Docker engines behind one farm: placement, health and the record of a run's hosts.

    hosts = HostSet.from_config(FarmConfig(hosts=[DockerHost(url="unix:///a.sock"), ...]))
    host = hosts.reserve()           # least-loaded healthy host under its cap (or None)
    ...create on host.client()...
    hosts.release(host)

A host is drained (no new sandboxes, `drain` listeners told, e.g. the farm fails the sandboxes
it has there) when its engine does not answer its probe, or after `max_failures` engine errors
in a row. A drained host is probed again `readmit_s` after it was drained and re-admitted when
its engine answers (its client is made anew; its images are checked again). Without configured hosts
the set holds one host: the local engine from the environment, with no cap of its own.

Counters are changed under a lock (the grader calls in from its threads). `docker` is imported
inside functions.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import json
import logging
import math
import os
import re
import shutil
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from swefleet.envs.config import DockerHost, FarmConfig
from swefleet.envs.protocol import InfraError

from swefleet.rundir import write_text_atomic

log = logging.getLogger(__name__)

LOCAL = "local"
"""Name of the local engine (no configured hosts)."""
PROBE_TIMEOUT_S = 5.0


class NoHealthyHost(InfraError):
    """Every host of the farm is drained."""


class Host:
    """One engine: its client, its load (sandboxes, grading runs) and its health."""

    def __init__(self, config: DockerHost | None, *, timeout_s: float = 120.0,
                 max_pool_size: int = 64, client: Any = None) -> None:
        self.config = config
        self.name = config.label if config else LOCAL
        self.cap = config.max_sandboxes if config else 1 << 30
        self.sandboxes = 0
        self.grading = 0
        self.failures = 0
        self.drained = ""
        """Why the host was drained; empty while it is healthy."""
        self.drained_at = 0.0
        """`time.monotonic()` when it was drained."""
        self.readmitted = 0
        """How many times it was re-admitted after a drain."""
        self._timeout_s, self._max_pool_size = timeout_s, max_pool_size
        self._client = client
        self._link: Callable[[], None] | None = None
        """Closes what `connect` opened besides the client (ssh tunnel, TLS relay)."""
        self._lock = threading.Lock()

    @property
    def load(self) -> int:
        return self.sandboxes + self.grading

    @property
    def connected(self) -> bool:
        """Whether `client()` was made (the host was used)."""
        return self._client is not None

    def client(self) -> Any:
        """The engine's Docker client (made on first use; an ssh host opens its tunnel, a TLS
        host its relay)."""
        with self._lock:
            if self._client is None:
                self._client, self._link = connect(
                    self.config, self._timeout_s, self._max_pool_size
                )
            return self._client

    def probe(self) -> str:
        """Empty when the engine answers `/_ping` within `PROBE_TIMEOUT_S`, else why not."""
        try:
            api = self.client().api
            res = api._get(api._url("/_ping"), timeout=PROBE_TIMEOUT_S)
            api._raise_for_status(res)
        except Exception as e:  # noqa: BLE001 - any failure to answer is the verdict
            return f"{type(e).__name__}: {e}"
        return ""

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
            if self._link is not None:
                self._link()
            self._client = self._link = None

    def __repr__(self) -> str:
        state = f"drained: {self.drained}" if self.drained else "healthy"
        return f"Host({self.name}, {self.sandboxes}/{self.cap} sandboxes, {state})"


class HostSet:
    """The hosts of one farm (and its grader); see the module docstring."""

    def __init__(self, hosts: list[Host], *, max_failures: int = 3, drainable: bool = True,
                 readmit_s: float | None = 60.0) -> None:
        """`drainable`: False keeps every host in placement whatever fails (the local engine
        alone: the behaviour without configured hosts). `readmit_s`: how long a drained host
        stays out before `check` probes it again (None: for good)."""
        if not hosts:
            raise ValueError("a HostSet needs at least one host")
        self.hosts = hosts
        self.max_failures = max_failures
        self.drainable = drainable
        self.readmit_s = readmit_s
        self.listeners: list[Callable[[Host], None]] = []
        self._lock = threading.Lock()
        self._images: dict[tuple[str, str], threading.Lock] = {}
        self._placed: set[tuple[str, str]] = set()
        self._local: list[Any] = []

    @classmethod
    def from_config(cls, config: FarmConfig, client: Any = None) -> HostSet:
        """The configured hosts, or the local engine (`client` if given) when there are none."""
        pool = 2 * config.max_concurrent + 8
        kw: dict[str, Any] = {"timeout_s": config.docker_timeout_s, "max_pool_size": pool}
        if not config.hosts:
            return cls([Host(None, client=client, **kw)], drainable=False)
        return cls([Host(h, **kw) for h in config.hosts], max_failures=config.host_failures,
                   readmit_s=config.host_readmit_s)

    def healthy(self) -> list[Host]:
        return [h for h in self.hosts if not h.drained]

    def pick(self, *, under_cap: bool = True) -> Host | None:
        """The least-loaded healthy host (under its cap when `under_cap`); ties: config order."""
        with self._lock:
            return self._pick(under_cap)

    def _pick(self, under_cap: bool) -> Host | None:
        free = [h for h in self.healthy() if not under_cap or h.sandboxes < h.cap]
        return min(free, key=lambda h: h.load / h.cap if under_cap else h.load, default=None)

    def reserve(self) -> Host | None:
        """A sandbox slot on the least-loaded healthy host under its cap, or None."""
        with self._lock:
            host = self._pick(True)
            if host is not None:
                host.sandboxes += 1
            return host

    async def reserve_wait(self, poll_s: float = 0.05) -> Host:
        """`reserve`, waiting for a free slot; `NoHealthyHost` once every host is drained."""
        while (host := self.reserve()) is None:
            if not self.healthy():
                raise NoHealthyHost(self._why_none())
            await asyncio.sleep(poll_s)
        return host

    def release(self, host: Host) -> None:
        with self._lock:
            host.sandboxes -= 1

    def begin_grading(self) -> Host:
        """The least-loaded healthy host for a grading run (caps do not apply)."""
        with self._lock:
            host = self._pick(False)
            if host is None:
                raise NoHealthyHost(self._why_none())
            host.grading += 1
            return host

    def end_grading(self, host: Host) -> None:
        with self._lock:
            host.grading -= 1

    def _why_none(self) -> str:
        why = "; ".join(f"{h.name}: {h.drained}" for h in self.hosts)
        return f"every Docker host is drained ({why})"

    # -- images ----------------------------------------------------------------------------

    def ensure_image(self, host: Host, tag: str) -> str:
        """Make sure `host` holds `tag` (blocking, once per host and tag): present, or copied
        from another healthy host or the local engine that has it (`envs.images.transfer_image`).
        Returns "present" or "from <name>"; `LookupError` when no engine has it."""
        from swefleet.envs.images import has_image, transfer_image

        key = (host.name, tag)
        with self._lock:
            lock = self._images.setdefault(key, threading.Lock())
        with lock:
            if key in self._placed or has_image(host.client(), tag):
                self._placed.add(key)
                return "present"
            for name, source in self._image_sources(host):
                if has_image(source, tag):
                    transfer_image(source, host.client(), tag)
                    self._placed.add(key)
                    return f"from {name}"
        raise LookupError(f"image {tag} is on no Docker engine (swefleet never pulls)")

    def _image_sources(self, target: Host) -> list[tuple[str, Any]]:
        """(name, client) of the other healthy hosts, then the local engine when it answers and
        is not a host already."""
        sources = [(h.name, h.client()) for h in self.healthy() if h is not target]
        if any(h.config is None for h in self.hosts):
            return sources
        with self._lock:
            if not self._local:
                self._local.append(_local_engine())
        return sources + ([(LOCAL, self._local[0])] if self._local[0] is not None else [])

    # -- health ----------------------------------------------------------------------------

    def drain(self, host: Host, reason: str) -> bool:
        """Take `host` out of placement and tell the listeners; False if it already was."""
        with self._lock:
            if host.drained or not self.drainable:
                return False
            host.drained = reason or "drained"
            host.drained_at = time.monotonic()
        log.warning("Docker host %s drained: %s", host.name, host.drained)
        for listener in list(self.listeners):
            listener(host)
        return True

    def engine_ok(self, host: Host) -> None:
        host.failures = 0

    def engine_error(self, host: Host, error: BaseException) -> bool:
        """An engine error on `host` (blocking: probes it). Drains it when the probe fails or
        after `max_failures` errors in a row. True when it is (now) drained."""
        with self._lock:
            host.failures += 1
            failures = host.failures
        if host.drained or not self.drainable:
            return bool(host.drained)
        why = host.probe()
        if not why and failures < self.max_failures:
            return False
        cause = why or f"{failures} engine errors in a row, the last: {type(error).__name__}: "
        return self.drain(host, cause + ("" if why else str(error)[:300]))

    def check(self) -> list[Host]:
        """Probe every healthy host (blocking); drain those that do not answer. Then probe the
        drained ones due again (`readmit_s`) and re-admit those that answer. Returns the hosts
        drained by this check."""
        drained = []
        for host in self.healthy():
            why = host.probe()
            if why and self.drain(host, f"engine does not answer: {why}"):
                drained.append(host)
        for host in self._due_for_readmission():
            self._try_readmit(host)
        return drained

    def _due_for_readmission(self) -> list[Host]:
        if self.readmit_s is None or math.isinf(self.readmit_s):
            return []
        now = time.monotonic()
        return [h for h in self.hosts if h.drained and now - h.drained_at >= self.readmit_s]

    def _try_readmit(self, host: Host) -> bool:
        """Re-admit `host` when a fresh client reaches its engine; False (still drained) if not."""
        host.close()  # the old connection (tunnel, relay, pool) may be dead with the engine
        why = host.probe()
        if why:
            host.close()
            host.drained_at = time.monotonic()  # next try `readmit_s` from now
            return False
        with self._lock:
            host.drained, host.failures = "", 0
            host.readmitted += 1
            self._placed = {key for key in self._placed if key[0] != host.name}
        log.warning("Docker host %s answers again: re-admitted", host.name)
        return True

    def metrics(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for h in self.hosts:
            key = re.sub(r"[^a-zA-Z0-9_.-]+", "_", h.name)
            out[f"env/host/{key}/sandboxes"] = float(h.sandboxes)
            out[f"env/host/{key}/healthy"] = 0.0 if h.drained else 1.0
            out[f"env/host/{key}/readmitted"] = float(h.readmitted)
        return out

    def close(self) -> None:
        for host in self.hosts:
            host.close()


def engine_fault(error: BaseException | None) -> bool:
    """Whether `error` (a docker-py/requests exception, or one caused by it) says the engine
    failed: no connection, a timeout, a 5xx answer. A 4xx answer (a container that is not
    running, a missing file or image) is about the request, not the engine."""
    import docker.errors
    import requests.exceptions

    while error is not None:
        if isinstance(error, docker.errors.APIError):
            return error.status_code is None or error.status_code >= 500
        if isinstance(error, (requests.exceptions.RequestException, docker.errors.DockerException)):
            return True
        error = error.__cause__
    return False


# -- clients -------------------------------------------------------------------------------


def connect(config: DockerHost | None, timeout_s: float = 120.0,
            max_pool_size: int = 64) -> tuple[Any, Callable[[], None] | None]:
    """(Docker client, closer of its ssh tunnel or TLS relay, or None) for a host; None: the
    local engine. The sandboxes' shell sessions need a plain stream from the engine, so ssh and
    TLS hosts are reached through a local unix socket (`ssh_tunnel`, `TlsRelay`)."""
    from swefleet.envs.containers import docker_client

    if config is None:
        return docker_client(timeout_s, max_pool_size=max_pool_size), None
    make = functools.partial(docker_client, timeout_s, max_pool_size)
    scheme = config.url.partition("://")[0]
    if scheme == "ssh":
        sock, tunnel = ssh_tunnel(config)
        return _client_over(make, f"unix://{sock}", lambda: _stop(tunnel, sock))
    if scheme == "tcp" and (config.tls_ca_cert or config.tls_client_cert):
        relay = TlsRelay(config)
        return _client_over(make, f"unix://{relay.path}", relay.close)
    return make(config.url), None


def _client_over(make: Callable[[str], Any], base_url: str,
                 close: Callable[[], None]) -> tuple[Any, Callable[[], None]]:
    """A client through a link (tunnel, relay); the link is closed if the client fails."""
    try:
        return make(base_url), close
    except BaseException:
        close()
        raise


def _stop(proc: subprocess.Popen[bytes], sock: str = "") -> None:
    """End an ssh tunnel (and remove its socket's directory)."""
    if proc.poll() is None:
        proc.terminate()
        proc.wait(10)
    if sock:
        shutil.rmtree(os.path.dirname(sock), ignore_errors=True)


class TlsRelay:
    """A local unix socket (mode 600) whose every connection is relayed to a TLS engine with
    the host's certificates: the Docker client and the shell sessions see a plain stream. An
    event loop of its own in a daemon thread does the TLS (one SSL object, one thread)."""

    def __init__(self, config: DockerHost) -> None:
        u = urlparse(config.url)
        self.address = (u.hostname or "", u.port or 2376)
        self._context = _tls_context(config)
        self.path = os.path.join(tempfile.mkdtemp(prefix="swefleet-tls-"), "docker.sock")
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True,
                                        name="swefleet-tls-relay")
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(self._listen(), self._loop).result(10)

    async def _listen(self) -> asyncio.AbstractServer:
        server = await asyncio.start_unix_server(self._relay, path=self.path)
        os.chmod(self.path, 0o600)
        return server

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.wait_for(asyncio.open_connection(
                *self.address, ssl=self._context, server_hostname=self.address[0]
            ), PROBE_TIMEOUT_S)
        except (OSError, TimeoutError) as e:
            log.warning("TLS relay to %s:%d: %s: %s", *self.address, type(e).__name__, e)
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    def close(self) -> None:
        """Stop listening, end every relayed connection, stop the loop (idempotent)."""
        if self._loop.is_closed():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(10)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
            self._loop.close()
            shutil.rmtree(os.path.dirname(self.path), ignore_errors=True)

    async def _shutdown(self) -> None:
        self._server.close()
        relays = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for task in relays:
            task.cancel()
        await asyncio.gather(*relays, return_exceptions=True)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Copy until `reader` ends, then close `writer` (so the other direction ends too)."""
    try:
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
    except OSError:
        pass
    finally:
        writer.close()


def _tls_context(config: DockerHost) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=config.tls_ca_cert or None)
    if not config.tls_ca_cert:  # client certificate only: the engine is not verified
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    if config.tls_client_cert:
        context.load_cert_chain(config.tls_client_cert, config.tls_client_key)
    return context


def _local_engine() -> Any:
    """The local engine's client when one answers, else None (a node without Docker)."""
    from swefleet.envs.containers import docker_client

    try:
        client = docker_client(timeout_s=120)
        client.ping()
    except Exception as e:  # noqa: BLE001 - no local engine: only the hosts are sources
        log.info("no local Docker engine to copy images from: %s", e)
        return None
    return client


def ssh_command(host: DockerHost, local_sock: str) -> list[str]:
    """OpenSSH forwarding `local_sock` to the engine socket of an `ssh://` host: the URL's path,
    else `/var/run/docker.sock`."""
    u = urlparse(host.url)
    if not u.hostname:
        raise ValueError(f"no host in {host.url!r}")
    dest = f"{u.username}@{u.hostname}" if u.username else u.hostname
    opts = ["-p", str(u.port)] if u.port else []
    if host.ssh_identity_file:
        opts += ["-i", host.ssh_identity_file, "-o", "IdentitiesOnly=yes"]
    if host.ssh_known_hosts:
        opts += ["-o", f"UserKnownHostsFile={host.ssh_known_hosts}",
                 "-o", "StrictHostKeyChecking=yes"]
    remote_sock = u.path or "/var/run/docker.sock"
    return ["ssh", "-NT", "-o", "ExitOnForwardFailure=yes", "-o", "BatchMode=yes",
            "-o", "StreamLocalBindUnlink=yes", *opts, "-L", f"{local_sock}:{remote_sock}", "--",
            dest]


def ssh_tunnel(host: DockerHost, wait_s: float = 20.0) -> tuple[str, subprocess.Popen[bytes]]:
    """Start `ssh_command` and wait for its local socket. The exec sessions of the sandboxes
    need a plain stream, which a forwarded unix socket is (docker-py's own ssh transport is
    not). ssh's messages go to `ssh.log` beside the socket (a pipe nobody reads would fill up
    and stall the tunnel)."""
    if shutil.which("ssh") is None:
        raise InfraError(f"{host.url}: the `ssh` client is not installed")
    sock = os.path.join(tempfile.mkdtemp(prefix="swefleet-ssh-"), "docker.sock")
    errlog = Path(sock).with_name("ssh.log")
    with errlog.open("wb") as err:
        proc = subprocess.Popen(ssh_command(host, sock), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err)
    atexit.register(_stop, proc, sock)  # (a no-op once the host closed it)
    deadline = time.monotonic() + wait_s
    while not os.path.exists(sock):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            why = errlog.read_text(errors="replace")[-500:].strip()
            shutil.rmtree(os.path.dirname(sock), ignore_errors=True)
            raise InfraError(f"ssh tunnel to {host.url} failed: {why or 'timed out'}")
        time.sleep(0.05)
    return sock, proc


_SHARED: dict[str, HostSet] = {}


def shared_hosts(run_id: str, config: FarmConfig) -> HostSet | None:
    """The one `HostSet` of `run_id` that its farm and grader share (so both skip a host
    either saw fail); None without configured hosts (each uses the local engine)."""
    if not config.hosts:
        return None
    if run_id not in _SHARED:
        _SHARED[run_id] = HostSet.from_config(config)
    return _SHARED[run_id]


# -- which hosts a run used (for cleanup from another process) -----------------------------


def _record_path(run_id: str) -> Path:
    root = Path(os.environ.get("SWEFLEET_CACHE", Path.home() / ".cache" / "swefleet")) / "runs"
    slug = re.sub(r"[^a-zA-Z0-9_.-]", "-", run_id)[:120]
    return root / f"{slug}.hosts.json"


def record_run(run_id: str, hosts: list[DockerHost]) -> None:
    """Remember the hosts of `run_id` (atomically), so `envs.reaper.remove_run_containers`
    (`swefleet clean`, the end of a run) covers every one of them. No hosts: nothing kept."""
    if not hosts:
        return
    path = _record_path(run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps([h.model_dump() for h in hosts]))


def recorded_hosts(run_id: str) -> list[DockerHost]:
    """The hosts `record_run` kept for `run_id`; empty when it kept none."""
    try:
        raw = json.loads(_record_path(run_id).read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return []
    return [DockerHost.model_validate(h) for h in raw]
