"""Test helper: the scripted chat server (`inference.scripted_chat_server`) on a loopback port,
served by uvicorn in a thread of the test process (starts in milliseconds)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx


@contextmanager
def chat_server(script: list[dict[str, Any]], served: str = "scripted") -> Iterator[str]:
    """The base URL of a scripted chat server playing `script`, until the block ends."""
    import uvicorn
    from swefleet.inference.scripted_chat_server import create_app
    from swefleet.inference.serving import bind_socket

    sock = bind_socket("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(create_app(script, served), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        assert time.monotonic() < deadline, "scripted chat server did not start"
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def requests_seen(url: str) -> list[dict[str, Any]]:
    """The requests the server received: `{"body": ..., "authorization": ...}` each."""
    return httpx.get(f"{url}/requests", trust_env=False).json()
