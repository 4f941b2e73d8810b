"""An HTTP server on a unix socket, for stand-ins of a Docker engine's API in tests."""

from __future__ import annotations

import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler
from pathlib import Path


class UnixHTTPServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        sock, _ = super().get_request()
        return sock, ("engine", 0)  # http.server wants a (host, port) client address


def start(path: Path, handler: type[BaseHTTPRequestHandler]) -> UnixHTTPServer:
    """`handler` served at `path` in a thread, until `shutdown()` and `server_close()`."""
    server = UnixHTTPServer(str(path), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@contextmanager
def serving(path: Path, handler: type[BaseHTTPRequestHandler]) -> Iterator[str]:
    """`unix://` URL of `handler` served at `path` until the block ends."""
    server = start(path, handler)
    try:
        yield f"unix://{path}"
    finally:
        server.shutdown()
        server.server_close()
