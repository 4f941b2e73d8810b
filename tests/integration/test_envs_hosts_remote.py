"""The farm's remote transports for real: a second dockerd (`docker/second-engine.sh --tls`)
that answers on tcp://127.0.0.1 with `--tlsverify` (throw-away CA, server and client
certificates), and a real OpenSSH server on 127.0.0.1 (throw-away host and client keys) whose
forwarded socket is that engine's. Episodes (scripted agent, real sandboxes, real grading) run
on the local engine and on the remote host; the sandboxes the remote host got are seen created
on the second engine itself. The module leaves no daemon, key, container or mount behind."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from swefleet.envs import reaper
from swefleet.envs.config import DockerHost, FarmConfig
from swefleet.envs.farm import DockerFarm
from swefleet.envs.grading import DockerGrader
from swefleet.envs.hosts import Host, HostSet

from swefleet.types import EpisodeStatus
from tests.integration.test_envs_hosts import LIMITS, LOCAL_URL, _engine, _episodes

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]
_SCRIPT = Path(__file__).resolve().parents[2] / "docker/second-engine.sh"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, alive: subprocess.Popen | None = None, wait_s: float = 20) -> None:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if (alive and alive.poll() is not None) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


@pytest.fixture(scope="module")
def tls_engine():
    """(tcp:// url, certificate dir, unix:// url) of a second dockerd that also listens on
    127.0.0.1 with --tlsverify; stopped (daemon, netns, mounts, certificates) after."""
    if os.geteuid() != 0 or not all(map(shutil.which, ("dockerd", "ip", "openssl", "python3"))):
        pytest.skip("a TLS engine needs root, dockerd, iproute2, openssl and python3")
    if not Path(LOCAL_URL.removeprefix("unix://")).exists():
        pytest.skip("no local Docker engine at /var/run/docker.sock")
    root = Path(tempfile.mkdtemp(prefix="swefleet-se-"))  # short: socket paths < 108 bytes
    port = _free_port()
    try:
        subprocess.run(["bash", str(_SCRIPT), "start", str(root), "--tls", str(port)],
                       check=True, timeout=120, stdout=subprocess.DEVNULL)
        yield f"tcp://127.0.0.1:{port}", root / "tls", f"unix://{root}/docker.sock"
    finally:
        _engine("stop", root)
    assert not root.exists()


def _sshd_binary() -> str:
    """sshd, installed with apt-get when missing (skips, saying why, when that fails)."""
    if found := shutil.which("sshd") or shutil.which("sshd", path="/usr/sbin"):
        return found
    if not shutil.which("apt-get"):
        pytest.skip("sshd is not installed and there is no apt-get to install openssh-server")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "openssh-server"]
    kw = {"env": env, "capture_output": True, "text": True, "timeout": 300}
    res = subprocess.run(install, check=False, **kw)
    if res.returncode != 0:  # stale package lists: refresh once
        subprocess.run(["apt-get", "update", "-qq"], check=False, **kw)
        res = subprocess.run(install, check=False, **kw)
    if res.returncode != 0 or not Path("/usr/sbin/sshd").exists():
        pytest.skip(f"apt-get could not install openssh-server: {res.stderr.strip()[-300:]}")
    return "/usr/sbin/sshd"


def _keygen(path: Path) -> str:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "swefleet-test",
                    "-f", str(path)], check=True, capture_output=True)
    return path.with_suffix(".pub").read_text().strip()


def _sshd_config(d: Path, port: int) -> str:
    return "\n".join([
        f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {d}/host_key",
        f"PidFile {d}/sshd.pid", f"AuthorizedKeysFile {d}/authorized_keys",
        "AllowUsers root", "PermitRootLogin prohibit-password", "PubkeyAuthentication yes",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
        "StrictModes no", "X11Forwarding no", "PermitTTY no",
        # -L to a socket needs both: `AllowTcpForwarding no` refuses socket forwards too
        "AllowStreamLocalForwarding local", "AllowTcpForwarding local", "",
    ])


def _descendants(pid: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        out += (kids := children.get(todo.pop(), []))
        todo += kids
    return out


@pytest.fixture(scope="module")
def sshd():
    """(port, client key, known_hosts) of an OpenSSH server on 127.0.0.1 that lets root in
    with one throw-away ed25519 key; the server, its sessions and every key are gone after."""
    if os.geteuid() != 0 or not shutil.which("ssh") or not shutil.which("ssh-keygen"):
        pytest.skip("the ssh test needs root and the OpenSSH client (ssh, ssh-keygen)")
    binary = _sshd_binary()
    d = Path(tempfile.mkdtemp(prefix="swefleet-sshd-"))
    privsep = Path("/run/sshd")  # sshd insists on it (Debian makes it at service start)
    made_privsep = not privsep.exists()
    proc = None
    try:
        port = _free_port()
        host_pub = _keygen(d / "host_key")
        (d / "authorized_keys").write_text(_keygen(d / "id_ed25519") + "\n")
        (d / "known_hosts").write_text(f"[127.0.0.1]:{port} {host_pub}\n")
        (d / "sshd_config").write_text(_sshd_config(d, port))
        privsep.mkdir(mode=0o755, exist_ok=True)
        with (d / "sshd.log").open("wb") as log:
            proc = subprocess.Popen([binary, "-D", "-e", "-f", str(d / "sshd_config")],
                                    stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        _wait_port(port, proc)
        yield port, str(d / "id_ed25519"), str(d / "known_hosts")
    finally:
        if proc is not None:
            _end(_descendants(proc.pid))  # sessions outlive the listener, which reaps them
            proc.terminate()
            proc.wait(10)
        shutil.rmtree(d)
        if made_privsep:
            shutil.rmtree(privsep, ignore_errors=True)


def _end(pids: list[int], wait_s: float = 10) -> None:
    """SIGTERM `pids`, and wait until each is gone."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + wait_s
    while alive := [p for p in pids if Path(f"/proc/{p}").exists()]:
        assert time.monotonic() < deadline, f"sshd processes {alive} outlived SIGTERM"
        time.sleep(0.05)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SWEFLEET_CACHE", str(tmp_path))  # the run's host record goes here


@pytest.fixture(scope="module")
def gradable(envs_tiny_task):
    return envs_tiny_task.model_copy(update={
        "test_files": ["test_calc.py"], "FAIL_TO_PASS": ["test_calc.py::test_add"],
    })


def _created_sandboxes(engine_url: str, run_id: str, since: float) -> int:
    """Sandbox containers of `run_id` created on the engine at `engine_url` since `since`."""
    import docker

    client = docker.DockerClient(base_url=engine_url, version="auto")
    try:
        labels = [f"swefleet.run={run_id}", "swefleet.kind=sandbox"]
        events = client.events(since=int(since), until=int(time.time()) + 1, decode=True,
                               filters={"type": "container", "event": "create", "label": labels})
        return sum(1 for _ in events)
    finally:
        client.close()


async def _two_episodes_one_remote(remote: DockerHost, engine_url: str, task, tok) -> None:
    """Two episodes on [local engine, `remote`] (one sandbox each at most): both resolve, one
    ran on `remote`, whose sandbox the second engine (`engine_url`) created."""
    run_id = f"test-remote-{uuid.uuid4().hex[:8]}"
    config = FarmConfig(limits=LIMITS, create_rate_per_s=50, host_check_interval_s=0.5,
                        max_concurrent=2,
                        hosts=[DockerHost(url=LOCAL_URL, name="one", max_sandboxes=1), remote])
    hosts = HostSet.from_config(config)
    grader = DockerGrader(run_id, timeout_s=60, hosts=hosts)
    sunk: list = []
    since = time.time() - 1
    try:
        async with DockerFarm(run_id, config, hosts=hosts) as farm:
            trajs, peak = await _episodes(farm, grader, tok, task, 2, "sleep 1", sunk)
            assert [t.status for t in trajs] == [EpisodeStatus.resolved] * 2, \
                [(t.status, t.reason) for t in trajs]
            assert peak == {"one": 1, remote.name: 1} and not farm.hosts.hosts[1].drained
        assert all(t.reward == 1.0 for t in sunk) and len(sunk) == 2
        for host in hosts.hosts:
            assert reaper.leftover_containers(host.client(), run_id) == []
    finally:
        grader.close()
        hosts.close()
    assert _created_sandboxes(engine_url, run_id, since) == 1


async def test_a_tls_engine_runs_sandboxes(tls_engine, gradable, tok, cache):
    url, certs, engine_url = tls_engine
    no_client_cert = Host(DockerHost(url=url, tls_ca_cert=str(certs / "ca.pem")))
    try:
        assert no_client_cert.probe()  # --tlsverify: a client without a certificate is refused
    finally:
        no_client_cert.close()
    remote = DockerHost(url=url, name="tls", max_sandboxes=1, tls_ca_cert=str(certs / "ca.pem"),
                        tls_client_cert=str(certs / "cert.pem"),
                        tls_client_key=str(certs / "key.pem"))
    await _two_episodes_one_remote(remote, engine_url, gradable, tok)


async def test_an_ssh_host_runs_sandboxes(tls_engine, sshd, gradable, tok, cache):
    _, _, engine_url = tls_engine
    port, key, known_hosts = sshd
    remote = DockerHost(url=f"ssh://root@127.0.0.1:{port}{engine_url.removeprefix('unix://')}",
                        name="ssh", max_sandboxes=1, ssh_identity_file=key,
                        ssh_known_hosts=known_hosts)
    await _two_episodes_one_remote(remote, engine_url, gradable, tok)
    assert list(Path(tempfile.gettempdir()).glob("swefleet-ssh-*")) == []  # tunnel closed
