"""Start inference servers as subprocesses (own process group) and stop them for sure.

    settings = EngineSettings(model_dir=model_dir, device="cpu")  # or .from_inference(...)
    with start_embedded_server(settings, log_path=run / "server.log") as server:
        client = FleetClient([server.url], config)

The server binds its port itself (port 0 picks a free one) and writes it to a port file;
we wait for that file and then for `/health` to answer 200, within `startup_timeout_s`. If the
process exits or the deadline passes first, the process group is killed and `ServerStartError`
carries the tail of its log. `stop()` sends SIGTERM to the whole group, then SIGKILL.
`spawn_server` + `wait_ready` split the two halves (the fleet of a run: `inference.fleet_launch`;
vLLM has no port file: its port is chosen before the start).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Self

import httpx
from swefleet.inference.engine.settings import EngineSettings

from swefleet.procs import die_with_parent


class ServerStartError(RuntimeError):
    """A server process exited or missed its startup deadline."""


def _log_tail(path: Path, n_chars: int = 3000) -> str:
    try:
        return path.read_text(errors="replace")[-n_chars:]
    except OSError:
        return ""


@dataclass
class ServerHandle:
    """A running server process; `stop()` (or leaving the `with` block) ends its group."""

    proc: subprocess.Popen
    url: str
    port: int
    log_path: Path
    host: str = "127.0.0.1"
    port_file: Path | None = None
    """Where a server started with `--port 0` reports its port (None: the port is known)."""

    @classmethod
    def of(
        cls, proc: subprocess.Popen, log_path: Path, *, host: str, port: int,
        port_file: Path | None,
    ) -> ServerHandle:
        """The handle of a started server: at `port`, or (with a port file) at the port it
        reports there, found by `wait_ready`."""
        url = f"http://{host}:{port}" if port and port_file is None else ""
        return cls(proc, url, port if port_file is None else 0, log_path, host=host,
                   port_file=port_file)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM the process group, SIGKILL it after `grace_s`; returns the exit code."""
        if self.proc.poll() is None:
            self._signal(signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                self._signal(signal.SIGKILL)
                self.proc.wait()
        self._signal(signal.SIGKILL)  # stragglers of the group, if any
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL the group at once (tests: a crashed server)."""
        self._signal(signal.SIGKILL)
        self.proc.wait()

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def spawn_server(
    argv: Sequence[str],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    log_path: str | Path | None = None,
    env: dict[str, str] | None = None,
    port_file: bool = True,
) -> ServerHandle:
    """Start `argv` in its own process group and return at once (`wait_ready` waits). With
    `port_file` the server gets `--port-file F` and reports its port there (for `--port 0`);
    without it `port` must be the port the server binds. Call from the main thread: the
    server dies with the thread that started it (`die_with_parent`). `env` is the full
    environment (None: this process's)."""
    if log_path:
        log = Path(log_path)
    else:
        fd, name = tempfile.mkstemp(prefix="swefleet-server-", suffix=".log")
        os.close(fd)
        log = Path(name)
    log.parent.mkdir(parents=True, exist_ok=True)
    pf = new_port_file() if port_file else None
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [*argv, *(["--port-file", str(pf)] if pf else [])],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - a kill -9 of the parent must not orphan it
            env=env,
        )
    return ServerHandle.of(proc, log, host=host, port=port, port_file=pf)


def new_port_file() -> Path:
    """A fresh path (in its own temporary directory) for a server to report its port in."""
    return Path(tempfile.mkdtemp(prefix="swefleet-port-")) / "port"


def wait_ready(
    handle: ServerHandle, startup_timeout_s: float, routes: Sequence[str] = ("/health",)
) -> None:
    """Wait for the port (port file) and a 200 from every route; on an exit or the deadline
    the group is killed and `ServerStartError` carries the tail of the log."""
    deadline = time.monotonic() + startup_timeout_s
    pf = handle.port_file
    try:
        if pf is not None:
            handle.port = _wait_port(handle.proc, pf, deadline, handle.log_path)
            handle.url = f"http://{handle.host}:{handle.port}"
        for route in routes:
            _wait_route(handle, route, deadline)
    except BaseException:
        handle.stop(grace_s=2.0)
        raise
    finally:
        if pf is not None:
            pf.unlink(missing_ok=True)
            pf.parent.rmdir()
            handle.port_file = None


def start_server(
    argv: Sequence[str],
    *,
    host: str = "127.0.0.1",
    log_path: str | Path | None = None,
    startup_timeout_s: float = 300.0,
    env: dict[str, str] | None = None,
) -> ServerHandle:
    """Run `argv` (a server accepting `--port-file`) and wait until its /health answers."""
    handle = spawn_server(
        argv, host=host, log_path=log_path, env={**os.environ, **(env or {})}
    )
    wait_ready(handle, startup_timeout_s)
    return handle


def _wait_port(proc: subprocess.Popen, port_file: Path, deadline: float, log: Path) -> int:
    while not port_file.exists():
        _check_running(proc, log, deadline)
        time.sleep(0.05)
    return int(port_file.read_text())


def _wait_route(handle: ServerHandle, route: str, deadline: float) -> None:
    with httpx.Client(trust_env=False, timeout=2.0) as http:
        while True:
            try:
                if http.get(f"{handle.url}{route}").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            _check_running(handle.proc, handle.log_path, deadline)
            time.sleep(0.1)


def _check_running(proc: subprocess.Popen, log: Path, deadline: float) -> None:
    if proc.poll() is not None:
        raise ServerStartError(
            f"server exited with {proc.returncode}; log {log}:\n{_log_tail(log)}"
        )
    if time.monotonic() > deadline:
        raise ServerStartError(
            f"server not healthy before its deadline; log {log}:\n{_log_tail(log)}"
        )


def embedded_command(settings: EngineSettings) -> list[str]:
    """The embedded server's command (without `--port-file`): its settings as one document."""
    return [
        sys.executable,
        "-m",
        "swefleet.inference.engine.server",
        "--settings",
        settings.to_json(),
    ]


def start_embedded_server(
    settings: EngineSettings,
    log_path: str | Path | None = None,
    *,
    startup_timeout_s: float = 300.0,
) -> ServerHandle:
    """Start the embedded server of `settings` and wait until it is healthy; it serves
    `settings.served_model_names` (empty: the directory's name) and 404s any other `model`.
    A fleet's servers: `EngineSettings.from_inference(config, model_dir, ...)`."""
    return start_server(
        embedded_command(settings),
        host=settings.host,
        log_path=log_path,
        startup_timeout_s=startup_timeout_s,
    )


def start_scripted_server(
    *,
    delay_s: float = 0.0,
    policy_version: int = 0,
    log_path: str | Path | None = None,
    startup_timeout_s: float = 60.0,
    kv_capacity: int = 0,
    hang_token: int = -1,
    token_delay_s: float = 0.0,
) -> ServerHandle:
    """Start the model-free `inference.scripted_server` (tests, benchmarks); `kv_capacity` > 0
    makes it expose `vllm:kv_cache_usage_perc` = in-flight requests / kv_capacity; requests
    whose prompt starts with `hang_token` never answer (streamed: headers, then nothing);
    `token_delay_s` spaces the tokens of a streamed answer."""
    argv = [
        sys.executable,
        "-m",
        "swefleet.inference.scripted_server",
        "--port",
        "0",
        "--delay-s",
        str(delay_s),
        "--policy-version",
        str(policy_version),
        "--kv-capacity",
        str(kv_capacity),
        "--hang-token",
        str(hang_token),
        "--token-delay-s",
        str(token_delay_s),
    ]
    return start_server(argv, log_path=log_path, startup_timeout_s=startup_timeout_s)
