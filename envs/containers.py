"""Thin, blocking helpers over the Docker SDK: client, labels, create/remove, exec sockets.

Everything here blocks; async callers use `asyncio.to_thread`. `docker` is imported inside the
functions so that importing `envs` stays cheap.
"""

from __future__ import annotations

import io
import math
import os
import re
import socket
import tarfile
import time
import uuid
from typing import Any

from swefleet.envs.config import SandboxLimits

LABEL_RUN = "swefleet.run"
LABEL_OWNER = "swefleet.owner"
LABEL_OWNER_HOST = "swefleet.owner_host"
LABEL_OWNER_PID = "swefleet.owner_pid"
LABEL_OWNER_START = "swefleet.owner_start"
LABEL_CREATED = "swefleet.created_at"
LABEL_EXPIRES = "swefleet.expires_at"
LABEL_INSTANCE = "swefleet.instance"
LABEL_KIND = "swefleet.kind"


def docker_client(
    timeout_s: float = 120.0, max_pool_size: int = 64, base_url: str | None = None
) -> Any:
    """The one way swefleet makes a Docker client: the engine at `base_url`, or the one the
    environment names (`DOCKER_HOST`, else the local socket); API version negotiated, calls
    time out after `timeout_s`, up to `max_pool_size` pooled connections."""
    import docker

    kw: dict[str, Any] = {"version": "auto", "timeout": int(timeout_s),
                          "max_pool_size": max_pool_size}
    if base_url is None:
        return docker.from_env(**kw)
    return docker.DockerClient(base_url=base_url, **kw)


def process_start_time(pid: int) -> str:
    """Start time of `pid` in clock ticks since boot (tells a live owner from a reused pid)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return ""
    return stat[stat.rindex(b")") + 2 :].split()[19].decode()


def owner_labels() -> dict[str, str]:
    """Who owns a container: this host and process (the reaper checks whether it still lives)."""
    host, pid = socket.gethostname(), os.getpid()
    return {
        LABEL_OWNER: f"{host}:{pid}",
        LABEL_OWNER_HOST: host,
        LABEL_OWNER_PID: str(pid),
        LABEL_OWNER_START: process_start_time(pid),
    }


_labelled_runs: set[str] = set()


def labelled_runs() -> set[str]:
    """The run ids this process has labelled containers with (`sandbox_labels`): whose
    containers an interrupted command removes last (`swefleet.app.interrupt`)."""
    return set(_labelled_runs)


def sandbox_labels(run_id: str, lifetime_s: float, instance_id: str = "") -> dict[str, str]:
    _labelled_runs.add(run_id)
    now = time.time()
    return {
        LABEL_RUN: run_id,
        LABEL_KIND: "sandbox",
        LABEL_CREATED: f"{now:.3f}",
        LABEL_EXPIRES: f"{now + lifetime_s:.3f}",
        LABEL_INSTANCE: instance_id,
        **owner_labels(),
    }


def container_name(run_id: str) -> str:
    slug = re.sub(r"[^a-zA-Z0-9_.-]", "-", run_id)[:40].strip("-.") or "run"
    return f"swefleet-{slug}-{uuid.uuid4().hex[:8]}"


def run_kwargs(image: str, limits: SandboxLimits, labels: dict[str, str]) -> dict[str, Any]:
    """`containers.create` arguments: hostile-by-default limits and a self-ending PID 1."""
    from docker.types import Ulimit

    kwargs: dict[str, Any] = {
        "image": image,
        "command": ["sleep", str(math.ceil(limits.lifetime_s))],
        "entrypoint": [],  # the image's ENTRYPOINT is not run (it would swallow the command)
        "name": container_name(labels[LABEL_RUN]),
        "labels": labels,
        "init": True,  # tini as PID 1 reaps orphans (killed process groups leave zombies otherwise)
        "auto_remove": True,  # ends by itself after lifetime_s and leaves nothing behind
        "user": "0:0",  # PID 1 is out of reach of the agent user (different uid, no capabilities)
        "hostname": "sandbox",
        "network_mode": "bridge" if limits.network else "none",
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges:true"],
        "mem_limit": f"{limits.memory_mb}m",
        "memswap_limit": f"{limits.memory_mb}m",
        "nano_cpus": int(limits.cpus * 1e9),
        "pids_limit": limits.pids_limit,
        "ulimits": [
            Ulimit(name="nofile", soft=limits.nofile, hard=limits.nofile),
            Ulimit(name="fsize", soft=limits.max_file_mb * 1024 * 1024,
                   hard=limits.max_file_mb * 1024 * 1024),
        ],
    }
    if limits.tmpfs_mb:
        kwargs["tmpfs"] = {"/tmp": f"rw,exec,nosuid,nodev,size={limits.tmpfs_mb}m,mode=1777"}
    if limits.disk_mb:
        kwargs["storage_opt"] = {"size": f"{limits.disk_mb}M"}
    return kwargs


def remove_container(client: Any, container_id: str) -> bool:
    """Kill and remove; True if it was there. Gone or already being removed counts as done."""
    import docker.errors

    try:
        client.api.remove_container(container_id, force=True)
        return True
    except docker.errors.NotFound:
        return False
    except docker.errors.APIError as e:
        if e.status_code != 409:  # 409: removal already in progress (auto_remove raced us)
            raise
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # return only once it is really gone
        try:
            client.api.inspect_container(container_id)
        except docker.errors.NotFound:
            return False
        time.sleep(0.1)
    return False


def list_sandboxes(client: Any, run_id: str | None = None) -> list[dict[str, Any]]:
    """Raw container records (`Id`, `Labels`, `State`) of swefleet sandboxes, running or not."""
    label = f"{LABEL_RUN}={run_id}" if run_id is not None else LABEL_RUN
    return client.api.containers(all=True, filters={"label": label})


def writable_sizes(client: Any, run_id: str) -> dict[str, int]:
    """Writable-layer size in bytes (Docker's `SizeRw`) of each running container of `run_id`,
    in one API call (`GET /containers/json?size=1`; the daemon walks each writable layer)."""
    recs = client.api.containers(size=True, filters={"label": f"{LABEL_RUN}={run_id}"})
    return {rec["Id"]: int(rec.get("SizeRw") or 0) for rec in recs}  # 0 is left out


def open_exec_socket(
    client: Any,
    container_id: str,
    argv: list[str],
    *,
    user: str,
    workdir: str,
    env: dict[str, str],
) -> socket.socket:
    """Start `argv` in the container with stdin attached; return its raw, non-blocking socket.

    The stream is Docker's multiplexed format (no TTY). Needs a unix or plain-TCP Docker socket.
    """
    api = client.api
    ex = api.exec_create(
        container_id,
        argv,
        stdin=True,
        stdout=True,
        stderr=True,
        tty=False,
        user=user,
        workdir=workdir,
        environment=env,
    )
    sdk_sock = api.exec_start(ex["Id"], socket=True, tty=False)
    raw = getattr(sdk_sock, "_sock", sdk_sock)
    if not isinstance(raw, socket.socket) or hasattr(raw, "context"):
        raise RuntimeError(f"exec sessions need a unix or plain-TCP Docker socket, got {raw!r}")
    sock = socket.socket(fileno=os.dup(raw.fileno()))  # decouple from the SDK's objects
    sdk_sock.close()
    raw.close()
    sock.setblocking(False)
    return sock


def exec_once(
    client: Any,
    container_id: str,
    script: str,
    *,
    user: str,
    workdir: str,
    env: dict[str, str] | None = None,
    timeout_s: float = 60.0,
) -> tuple[int, bytes, bytes]:
    """Run `bash -c script` in a fresh exec, killed after `timeout_s`: (rc, stdout, stderr)."""
    api = client.api
    argv = ["timeout", "-s", "KILL", str(math.ceil(timeout_s)), "bash", "-c", script]
    ex = api.exec_create(container_id, argv, user=user, workdir=workdir, environment=env)
    out, err = api.exec_start(ex["Id"], demux=True)
    rc = api.exec_inspect(ex["Id"])["ExitCode"]
    return (rc if rc is not None else -1), out or b"", err or b""


def get_archive_capped(
    client: Any, container_id: str, path: str, max_bytes: int
) -> tuple[bytes | None, dict[str, Any]]:
    """(tar of `path`, its stat) like `api.get_archive`; the tar is None, unread, when the stat
    says the file is over `max_bytes`. The response is always closed (a stream left open keeps
    the daemon writing, and holding the container, until the connection dies)."""
    from docker.utils import decode_json_header

    api = client.api
    res = api._get(
        api._url("/containers/{0}/archive", container_id),
        params={"path": path},
        stream=True,
        headers={"Accept-Encoding": "identity"},
    )
    try:
        api._raise_for_status(res)
        encoded = res.headers.get("x-docker-container-path-stat")
        stat = decode_json_header(encoded) if encoded else {}
        if int(stat.get("size") or 0) > max_bytes and not stat.get("linkTarget"):
            return None, stat
        return res.content, stat
    finally:
        res.close()


def tar_one_file(name: str, data: bytes, uid: int, gid: int, mode: int) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size, info.uid, info.gid, info.mode, info.mtime = (
            len(data),
            uid,
            gid,
            mode,
            time.time(),
        )
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class SymlinkFound(Exception):
    """The archived path is a symbolic link (to `args[0]`)."""


def untar_one_file(chunks: Any, path: str) -> bytes:
    buf = io.BytesIO(chunks if isinstance(chunks, bytes) else b"".join(chunks))
    with tarfile.open(fileobj=buf, mode="r") as tar:
        member = tar.next()
        if member is not None and member.issym():
            raise SymlinkFound(member.linkname)
        if member is None or not member.isfile():
            raise IsADirectoryError(f"not a regular file: {path}")
        f = tar.extractfile(member)
        assert f is not None
        return f.read()
