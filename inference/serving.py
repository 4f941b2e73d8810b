"""Run an ASGI app on a pre-bound socket and announce its port (shared by both servers).

Binding before serving lets `--port 0` pick a free port without a race: the bound port is
written atomically to `--port-file`, which `inference.launch` waits for before polling /health.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (port 0: a free one), Nagle off.

    `proto=IPPROTO_TCP` matters: asyncio sets TCP_NODELAY on accepted connections only when the
    socket's proto says TCP, and a plain `socket.socket(AF_INET, SOCK_STREAM)` says 0. Without it
    every answer on a kept-alive connection written in two sends (headers, then body) waited for
    the client's delayed ACK: +40 ms per request (benchmarks/fleet_client.py)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # inherited by accepted sockets
    sock.bind((host, port))
    sock.listen(2048)
    return sock


def write_atomic(path: str | Path, text: str) -> None:
    """Write `text` to `path` whole or not at all (fsynced temp file, rename, fsynced dir)."""
    from swefleet.rundir import write_text_atomic

    write_text_atomic(path, text)


def serve(app: Any, host: str, port: int, port_file: str = "",
          on_bound: Callable[[int], None] | None = None) -> None:
    """Serve `app` with uvicorn until SIGINT/SIGTERM (graceful for at most 5 s); the bound port
    goes to `port_file` and `on_bound` once the socket listens (connections wait there until
    uvicorn accepts them)."""
    import uvicorn

    sock = bind_socket(host, port)
    config = uvicorn.Config(app, log_level="warning", access_log=False, timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    if port_file:
        write_atomic(port_file, str(sock.getsockname()[1]))
    if on_bound is not None:
        on_bound(sock.getsockname()[1])
    server.run(sockets=[sock])
