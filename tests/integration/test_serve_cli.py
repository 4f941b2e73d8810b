"""`swefleet serve MODEL`: the embedded engine's OpenAI-compatible server as a foreground command,
a real subprocess on loopback: one line with its URL, real chat and completion requests, then
SIGTERM or Ctrl-C end it promptly with one line and no traceback."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.integration
SWEFLEET = str(Path(sys.executable).with_name("swefleet"))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(model_dir: Path, port: int) -> subprocess.Popen:
    # Ctrl-C as in a terminal: a suite started in the background inherits SIGINT ignored, and
    # so would the command; a handler here becomes the default disposition across exec
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen([SWEFLEET, "serve", str(model_dir), "--port", str(port),
                                 "--device", "cpu"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    finally:
        signal.signal(signal.SIGINT, previous)


@pytest.mark.parametrize("stop,code,word", [(signal.SIGTERM, 143, "SIGTERM"),
                                            (signal.SIGINT, 130, "SIGINT")])
def test_serves_openai_requests_until_a_signal(model_dir, stop, code, word):
    port = _free_port()
    proc = _start(model_dir, port)
    try:
        line = proc.stdout.readline()  # printed once the socket listens
        assert f"at http://127.0.0.1:{port} (OpenAI-compatible" in line, (line, proc.poll())
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", trust_env=False,
                          timeout=60) as http:
            models = http.get("/v1/models").json()
            assert [m["id"] for m in models["data"]] == [model_dir.name]
            chat = http.post("/v1/chat/completions", json={
                "model": model_dir.name, "max_tokens": 6, "temperature": 0,
                "messages": [{"role": "user", "content": "def add(a, b):"}]})
            assert chat.status_code == 200, chat.text
            (choice,) = chat.json()["choices"]
            assert choice["message"]["role"] == "assistant"
            assert isinstance(choice["message"]["content"], str)
            assert choice["finish_reason"] in ("length", "stop")
            assert 0 < chat.json()["usage"]["completion_tokens"] <= 6
            text = http.post("/v1/completions", json={"prompt": "x = ", "max_tokens": 3})
            assert text.status_code == 200 and text.json()["usage"]["completion_tokens"] > 0
        t0 = time.monotonic()
        proc.send_signal(stop)
        rc = proc.wait(timeout=30)
        took = time.monotonic() - t0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = proc.stderr.read()
    assert rc == code and took < 30
    assert err.rstrip().splitlines()[-1] == f"swefleet serve: interrupted ({word})", err
    assert "Traceback" not in err
    with pytest.raises(httpx.ConnectError):  # the port is free again
        httpx.get(f"http://127.0.0.1:{port}/health", trust_env=False, timeout=2)


def test_a_busy_port_is_one_line_before_the_model_loads(model_dir):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run([SWEFLEET, "serve", str(model_dir), "--port", str(port)],
                              capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"swefleet serve: error: cannot listen on 127.0.0.1:{port}: "
                           "Address already in use\n")
