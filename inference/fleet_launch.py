"""The servers of a run's fleet: launch them (embedded engines or `vllm serve`), restart one on
its port with given weights, stop them all; external servers are only checked once.

    servers = ServerFleet("vllm", specs, config, run_dir / "logs")
    await servers.start(model_dir)            # ValueError (one line) / ServerStartError
    FleetClient(servers.urls, config)
    servers.respawn(1, weights_dir, version)  # same port, same log (appended)
    await servers.wait(1)

Each launched server is its own process group with its own log (`server-{i}.log`) and its GPUs
in CUDA_VISIBLE_DEVICES. Ports are fixed at the first start (an embedded server reports the one
it bound, a vLLM port is picked free beforehand), so a restarted server keeps its URL. Spawning
happens in the calling (main) thread, the waits in worker threads. With
`inference.standby_servers` each server gets a standby process once it is ready
(`inference/standby.py`), and its next restart becomes that process instead of a new one.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Sequence
from pathlib import Path

import httpx
from swefleet.inference.config import InferenceConfig, ServerSpec
from swefleet.inference.engine.settings import EngineSettings
from swefleet.inference.launch import ServerHandle, embedded_command, spawn_server, wait_ready
from swefleet.inference.standby import EMBEDDED_STANDBY, VLLM_STANDBY, Standby, spawn_standby
from swefleet.inference.vllm_launch import (
    launch_env,
    launch_profile,
    missing_executable,
    serve_command,
)

#: what a vLLM server must answer before it takes requests
VLLM_READY_ROUTES = ("/health", "/v1/models")


def free_port(host: str) -> int:
    """A port nothing listens on now (vLLM has no `--port-file`: its port is chosen first)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class ServerFleet:
    """The servers of one run, by index."""

    def __init__(
        self, kind: str, specs: Sequence[ServerSpec], config: InferenceConfig, log_dir: Path
    ) -> None:
        self.kind, self.specs, self.config, self.log_dir = kind, list(specs), config, log_dir
        self.handles: list[ServerHandle | None] = [None] * len(self.specs)
        self.ports = [spec.port for spec in self.specs]
        self.urls = [spec.url for spec in self.specs]
        self.standbys: list[Standby | None] = [None] * len(self.specs)

    @property
    def launched(self) -> bool:
        return self.kind != "external"

    def log_path(self, i: int) -> Path:
        return self.log_dir / f"server-{i}.log"

    async def start(self, model_dir: str | Path) -> list[str]:
        """Start every server on `model_dir` (version 0) and wait until all are ready; on a
        failure the started ones are stopped. External: each must answer `/health`."""
        if not self.launched:
            await asyncio.gather(*(asyncio.to_thread(self._check_external, u) for u in self.urls))
            return self.urls
        if self.kind == "vllm" and (problem := missing_executable(self.config.vllm.executable)):
            raise ValueError(problem)
        try:
            for i in range(len(self.specs)):
                self.respawn(i, model_dir, 0)
            await asyncio.gather(*(self.wait(i) for i in range(len(self.specs))))
        except BaseException:
            await asyncio.to_thread(self.stop)
            raise
        return self.urls

    def respawn(self, i: int, model_dir: str | Path, version: int) -> ServerHandle:
        """(Re)start server `i` on its port with `model_dir` as policy `version` (a vLLM server
        starts at version 0: the caller sets its version by a weight update); returns at once."""
        old = self.handles[i]
        if old is not None:
            old.stop(grace_s=5.0)
        log = self.log_path(i)
        log.parent.mkdir(parents=True, exist_ok=True)
        with open(log, "a") as f:
            f.write(f"--- swefleet: start on {model_dir} (v{version}) at {time.ctime()} ---\n")
        if self.kind == "vllm":
            argv, env = self._vllm_command(i, model_dir)
        else:
            argv, env = self._embedded_command(i, model_dir, version)
        handle = self._spawn(i, argv, env)
        self.handles[i] = handle
        return handle

    async def wait(self, i: int) -> None:
        """Wait until server `i` is ready (ServerStartError with its log tail if not)."""
        handle = self.handles[i]
        routes = VLLM_READY_ROUTES if self.kind == "vllm" else ("/health",)
        await asyncio.to_thread(wait_ready, handle, self.config.startup_timeout_s, routes)
        self.ports[i], self.urls[i] = handle.port, handle.url
        self._prepare_standby(i)  # in the calling (main) thread: die_with_parent

    def exited(self, i: int) -> bool:
        """Server `i` was launched and its process is gone."""
        handle = self.handles[i]
        return handle is not None and not handle.alive()

    def stop(self) -> None:
        """Stop every launched server (SIGTERM, then SIGKILL, whole process groups)."""
        for handle in self.handles:
            if handle is not None:
                handle.stop()
        for i, standby in enumerate(self.standbys):
            if standby is not None:
                standby.stop()
                self.standbys[i] = None

    def _embedded_command(
        self, i: int, model_dir: str | Path, version: int
    ) -> tuple[list[str], dict[str, str]]:
        spec = self.specs[i]
        settings = EngineSettings.from_inference(
            self.config,
            model_dir,
            port=self.ports[i],
            device=spec.device,
            policy_version=version,
            gpu_memory_fraction=spec.gpu_memory_fraction,
        )
        return embedded_command(settings), self._embedded_env(i)

    def _embedded_env(self, i: int) -> dict[str, str]:
        env = dict(os.environ)
        if gpus := self.specs[i].gpus:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
        return env

    def _vllm_command(self, i: int, model_dir: str | Path) -> tuple[list[str], dict[str, str]]:
        cfg, spec = self.config, self.specs[i]
        if not self.ports[i]:
            self.ports[i] = free_port(cfg.host)
        profile = launch_profile(
            cfg.vllm,
            model_dir,
            served_model_name=cfg.model_name,
            host=cfg.host,
            gpu_memory_utilization=spec.gpu_memory_fraction or 0.9,
        )
        argv, profile_env = serve_command(profile, self.ports[i], executable=cfg.vllm.executable)
        return argv, launch_env(profile_env, cfg.vllm.env, spec.gpus, cfg.vllm.bytecode_cache)

    def _spawn(self, i: int, argv: list[str], env: dict[str, str]) -> ServerHandle:
        """Server `i` from its standby when it has one for this environment, else a new process."""
        vllm = self.kind == "vllm"  # vLLM binds a port chosen beforehand; ours reports its own
        standby, self.standbys[i] = self.standbys[i], None
        if standby is not None:
            handle = standby.activate(argv, host=self.config.host, port=self.ports[i],
                                      port_file=not vllm, env=env)
            if handle is not None:
                return handle
        return spawn_server(argv, host=self.config.host, port=self.ports[i],
                            log_path=self.log_path(i), env=env, port_file=not vllm)

    def _prepare_standby(self, i: int) -> None:
        """A standby for server `i`'s next restart (`inference.standby_servers`)."""
        cfg = self.config
        if not (cfg.standby_servers and cfg.restart_dead_servers) or self.standbys[i] is not None:
            return
        if self.kind != "vllm":
            self.standbys[i] = spawn_standby(EMBEDDED_STANDBY, self._embedded_env(i),
                                             self.log_path(i))
        elif not cfg.vllm.executable:  # another installation's `vllm`: no stand-in from here
            _, env = self._vllm_command(i, "model")  # the environment does not depend on it
            self.standbys[i] = spawn_standby(VLLM_STANDBY, env, self.log_path(i))

    def _check_external(self, url: str) -> None:
        try:
            with httpx.Client(trust_env=False, timeout=self.config.connect_timeout_s) as http:
                status = http.get(f"{url}/health").status_code
        except httpx.HTTPError as exc:
            raise ValueError(
                f"inference server {url} unreachable ({type(exc).__name__}: {exc})"
            ) from None
        if status != 200:
            raise ValueError(f"inference server {url} unhealthy: GET /health answered {status}")
