"""envs.hosts: placement over many Docker hosts (least-loaded, caps), draining, health probes
against a real HTTP engine stand-in on a unix socket, the config, and the run's host record."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import socketserver
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler

import pytest
from pydantic import ValidationError
from swefleet.envs.config import DockerHost, FarmConfig
from swefleet.envs.hosts import (
    Host,
    HostSet,
    NoHealthyHost,
    engine_fault,
    record_run,
    recorded_hosts,
    ssh_command,
)
from swefleet.envs.protocol import InfraError

from tests.unix_http import UnixHTTPServer, serving, start

pytestmark = pytest.mark.unit


def _set(*caps: int, url: str = "unix:///nonexistent/docker.sock", **kw) -> HostSet:
    hosts = [DockerHost(url=url, name=f"h{i}", max_sandboxes=c) for i, c in enumerate(caps)]
    return HostSet.from_config(FarmConfig(hosts=hosts, **kw))


class _Engine(BaseHTTPRequestHandler):
    """Answers what a Docker client asks when it connects and probes: /version, /_ping."""

    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = json.dumps({"ApiVersion": "1.41"}).encode() if "version" in self.path else b"OK"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def engine(tmp_path):
    """unix:// URL of a server that answers like a healthy engine."""
    with serving(tmp_path / "docker.sock", _Engine) as url:
        yield url


def _self_signed(tmp_path, name: str) -> tuple[str, str]:
    cert, key = tmp_path / f"{name}.pem", tmp_path / f"{name}.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-keyout", str(key), "-out", str(cert), "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return str(cert), str(key)


class _TlsServer(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    context: ssl.SSLContext

    def get_request(self):
        sock, addr = super().get_request()
        return self.context.wrap_socket(sock, server_side=True), addr


@pytest.fixture
def tls_engine(tmp_path):
    """(tcp:// URL, CA file) of an engine stand-in that speaks TLS on loopback."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cert, key = _self_signed(tmp_path, "engine")
    server = _TlsServer(("127.0.0.1", 0), _Engine)
    server.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.context.load_cert_chain(cert, key)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"tcp://127.0.0.1:{server.server_address[1]}", cert
    server.shutdown()
    server.server_close()


def test_tls_hosts_are_reached_through_a_local_plain_socket(tls_engine, tmp_path):
    url, ca = tls_engine
    host = Host(DockerHost(url=url, tls_ca_cert=ca))
    client = host.client()
    assert client.api.base_url.startswith("http+docker://")  # a unix socket: plain stream
    assert host.probe() == "" and client.ping() and host.probe() == ""
    host.close()
    wrong_ca, _ = _self_signed(tmp_path, "other")
    stranger = Host(DockerHost(url=url, tls_ca_cert=wrong_ca))
    assert stranger.probe()  # the engine's certificate is not trusted: no answer
    stranger.close()


def test_each_sandbox_goes_to_the_least_loaded_host_under_its_cap():
    hosts = _set(2, 4, 1)
    placed = [hosts.reserve() for _ in range(7)]
    names = [h.name if h else None for h in placed]
    # load relative to the cap decides; ties go to the first configured host
    assert names == ["h0", "h1", "h2", "h1", "h0", "h1", "h1"]
    assert hosts.reserve() is None  # every cap is full
    assert [h.sandboxes for h in hosts.hosts] == [2, 4, 1]
    hosts.release(hosts.hosts[2])
    assert hosts.reserve() is hosts.hosts[2]


def test_grading_counts_as_load_but_ignores_caps():
    hosts = _set(1, 1)
    one = hosts.reserve()
    graded = [hosts.begin_grading() for _ in range(3)]
    assert graded[0] is hosts.hosts[1] and one is hosts.hosts[0]
    assert all(h.load >= 1 for h in hosts.hosts)  # over the caps: grading does not wait
    for h in graded:
        hosts.end_grading(h)
    assert [h.grading for h in hosts.hosts] == [0, 0]


def test_a_drained_host_gets_nothing_and_listeners_hear_once():
    hosts = _set(2, 2)
    heard = []
    hosts.listeners.append(heard.append)
    assert hosts.drain(hosts.hosts[0], "gone") and not hosts.drain(hosts.hosts[0], "again")
    assert heard == [hosts.hosts[0]] and hosts.hosts[0].drained == "gone"
    assert [hosts.reserve(), hosts.reserve(), hosts.reserve()] == [hosts.hosts[1]] * 2 + [None]
    assert hosts.begin_grading() is hosts.hosts[1]
    hosts.drain(hosts.hosts[1], "gone too")
    with pytest.raises(NoHealthyHost, match="h0: gone; h1: gone too"):
        hosts.begin_grading()
    with pytest.raises(NoHealthyHost):
        asyncio.run(hosts.reserve_wait())


def test_reserve_wait_waits_for_a_release():
    hosts = _set(1)

    async def scenario() -> list[str]:
        first = await hosts.reserve_wait()
        waiter = asyncio.ensure_future(hosts.reserve_wait(poll_s=0.01))
        await asyncio.sleep(0.05)
        assert not waiter.done()
        hosts.release(first)
        return [first.name, (await asyncio.wait_for(waiter, 2)).name]

    assert asyncio.run(scenario()) == ["h0", "h0"]


def test_an_unreachable_engine_is_drained_at_its_first_error():
    hosts = _set(2, 2)
    dead = hosts.hosts[0]
    assert hosts.engine_error(dead, ConnectionError("refused"))
    assert "engine" not in dead.drained and dead.drained  # the probe's own error is the reason
    assert hosts.check() == [hosts.hosts[1]]  # the periodic probe finds the other one too


def test_an_answering_engine_is_drained_only_after_errors_in_a_row(engine):
    hosts = _set(2, url=engine, host_failures=3)
    host = hosts.hosts[0]
    assert host.probe() == "" and hosts.check() == []
    assert not hosts.engine_error(host, RuntimeError("500 one"))
    hosts.engine_ok(host)  # a success in between starts the count again
    assert not hosts.engine_error(host, RuntimeError("500 two"))
    assert not hosts.engine_error(host, RuntimeError("500 three"))
    assert hosts.engine_error(host, RuntimeError("500 four"))
    assert "3 engine errors in a row" in host.drained and "500 four" in host.drained
    hosts.close()


class _ClosingEngine(_Engine):
    """The engine stand-in, one connection per request: once it stops, nothing answers."""

    protocol_version = "HTTP/1.0"


def _serve(path) -> UnixHTTPServer:
    return start(path, _ClosingEngine)


def test_a_drained_host_whose_engine_answers_again_is_readmitted(tmp_path):
    """An engine that was down (restarted, say) comes back: after `host_readmit_s` the health
    check reconnects to it and puts it back into placement; down again, it is drained again."""
    path = tmp_path / "docker.sock"
    hosts = _set(2, url=f"unix://{path}", host_readmit_s=0.3)
    host = hosts.hosts[0]
    assert hosts.check() == [host] and host.drained and hosts.pick() is None
    server = _serve(path)
    try:
        assert hosts.check() == [] and host.drained  # not due yet: drained 0.3 s ago at most
        time.sleep(0.35)
        assert hosts.check() == [] and not host.drained and host.readmitted == 1
        assert hosts.pick() is host and hosts.metrics()["env/host/h0/readmitted"] == 1.0
    finally:
        server.shutdown()
        server.server_close()
        path.unlink()
    assert hosts.check() == [host] and "does not answer" in host.drained
    time.sleep(0.35)
    assert hosts.check() == [] and host.drained and host.readmitted == 1  # still down: kept out
    hosts.close()


def test_without_readmission_a_drained_host_stays_out(tmp_path):
    path = tmp_path / "docker.sock"
    hosts = _set(1, url=f"unix://{path}", host_readmit_s=float("inf"))
    assert hosts.check() == hosts.hosts
    server = _serve(path)
    try:
        assert hosts.check() == [] and hosts.hosts[0].drained
    finally:
        server.shutdown()
        server.server_close()
    hosts.close()


def test_without_configured_hosts_the_local_engine_is_never_drained():
    hosts = HostSet.from_config(FarmConfig(), client=object())
    local = hosts.hosts[0]
    assert local.name == "local" and local.cap > 10**6
    assert not hosts.drain(local, "x") and not local.drained
    assert hosts.reserve() is local


def test_engine_fault_tells_the_engine_from_the_request():
    import docker.errors
    import requests

    class _Resp:
        def __init__(self, code: int) -> None:
            self.status_code, self.reason, self.url = code, "", "http://x"

    not_running = docker.errors.APIError("409", response=_Resp(409))
    crashed = docker.errors.APIError("500", response=_Resp(500))
    wrapped = RuntimeError("create failed")
    wrapped.__cause__ = requests.exceptions.ConnectionError("refused")
    assert not engine_fault(not_running) and engine_fault(crashed) and engine_fault(wrapped)
    assert not engine_fault(RuntimeError("the command failed")) and not engine_fault(None)


def test_host_config_is_checked():
    DockerHost(url="tcp://h:2376", tls_ca_cert="ca.pem", tls_client_cert="c", tls_client_key="k")
    for bad in ({"url": "http://h"}, {"url": "/var/run/docker.sock"},
                {"url": "unix:///s", "tls_ca_cert": "ca.pem"},
                {"url": "tcp://h:2376", "tls_client_cert": "c"},
                {"url": "tcp://h:2376", "ssh_identity_file": "id"},
                {"url": "unix:///s", "ssh_known_hosts": "kh"},
                {"url": "unix:///s", "max_sandboxes": 0}, {"url": "unix:///s", "cap": 2}):
        with pytest.raises(ValidationError):
            DockerHost(**bad)
    assert FarmConfig.model_validate({"hosts": [{"url": "ssh://u@h"}]}).hosts[0].label == "ssh://u@h"


def test_ssh_hosts_forward_a_local_socket():
    host = DockerHost(url="ssh://ci@build-3:2222", ssh_identity_file="/k/id",
                      ssh_known_hosts="/k/known")
    cmd = ssh_command(host, "/tmp/x/docker.sock")
    assert cmd[0] == "ssh" and cmd[-2:] == ["--", "ci@build-3"]
    assert cmd[cmd.index("-p") + 1] == "2222" and cmd[cmd.index("-i") + 1] == "/k/id"
    assert cmd[cmd.index("-L") + 1] == "/tmp/x/docker.sock:/var/run/docker.sock"
    assert "UserKnownHostsFile=/k/known" in cmd and "StrictHostKeyChecking=yes" in cmd
    plain = ssh_command(DockerHost(url="ssh://h/run/user/1000/docker.sock"), "/s")
    assert plain[plain.index("-L") + 1] == "/s:/run/user/1000/docker.sock"
    assert not {"-p", "-i", "StrictHostKeyChecking=yes"} & set(plain)


def test_a_failed_ssh_tunnel_says_why_and_leaves_nothing(tmp_path, monkeypatch):
    if shutil.which("ssh") is None:
        pytest.skip("the ssh client is not installed")
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # (tempfile reads it once: patch its cache)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    host = Host(DockerHost(url=f"ssh://nobody@127.0.0.1:{port}",
                           ssh_known_hosts=str(tmp_path / "known_hosts")))
    with pytest.raises(InfraError, match="ssh tunnel to .* failed: .*refused"):
        host.client()
    assert list(tmp_path.iterdir()) == []  # no socket directory, no log left


def test_the_run_records_its_hosts_for_cleanup(tmp_path, monkeypatch):
    monkeypatch.setenv("SWEFLEET_CACHE", str(tmp_path))
    hosts = [DockerHost(url="unix:///a.sock", name="a"), DockerHost(url="tcp://b:2375")]
    assert recorded_hosts("run/1") == []
    record_run("run/1", hosts)
    record_run("run-2", [])  # nothing configured: nothing kept (the local engine is implied)
    assert recorded_hosts("run/1") == hosts and recorded_hosts("run-2") == []


def test_host_repr_and_metrics():
    hosts = _set(2, 3)
    hosts.reserve()
    hosts.drain(hosts.hosts[1], "down")
    assert hosts.metrics() == {"env/host/h0/sandboxes": 1.0, "env/host/h0/healthy": 1.0,
                               "env/host/h0/readmitted": 0.0,
                               "env/host/h1/sandboxes": 0.0, "env/host/h1/healthy": 0.0,
                               "env/host/h1/readmitted": 0.0}
    assert "drained: down" in repr(hosts.hosts[1]) and isinstance(hosts.hosts[0], Host)
