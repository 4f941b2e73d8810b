"""envs.reaper against an engine whose listing and store disagree (seen after a killed engine
restarts: `ps -a` lists a container that `inspect` and `rm` call missing). The engine is a real
HTTP server on a unix socket answering the Docker API calls the reaper makes; the client is
docker-py's."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler
from typing import ClassVar

import pytest
from swefleet.envs import reaper
from swefleet.envs.containers import LABEL_RUN

from tests.unix_http import serving

pytestmark = pytest.mark.unit
RUN = "run-stale"
REAL, STALE = "a" * 64, "b" * 64


class _Engine(BaseHTTPRequestHandler):
    """Lists REAL (until it is removed) and STALE; only REAL can be inspected or removed."""

    protocol_version = "HTTP/1.1"
    present: ClassVar[set[str]] = {REAL}
    deletes: ClassVar[list[str]] = []

    def _send(self, code: int, body: object = None) -> None:
        data = json.dumps(body).encode() if body is not None else b""
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _id(self) -> str:
        return self.path.split("/containers/")[1].split("/")[0].split("?")[0]

    def do_GET(self) -> None:
        if self.path.endswith("/version"):
            return self._send(200, {"ApiVersion": "1.41"})
        if "/containers/json" in self.path:
            listed = sorted(self.present) + [STALE]
            return self._send(200, [{"Id": i, "Labels": {LABEL_RUN: RUN}, "State": "running"}
                                    for i in listed])
        cid = self._id()
        if cid in self.present:
            return self._send(200, {"Id": cid, "State": {"Running": True}})
        self._send(404, {"message": f"No such container: {cid}"})

    def do_DELETE(self) -> None:
        cid = self._id()
        type(self).deletes.append(cid)
        if cid in self.present:
            self.present.discard(cid)
            return self._send(204)
        self._send(404, {"message": f"No such container: {cid}"})

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def client(tmp_path):
    import docker

    _Engine.present, _Engine.deletes = {REAL}, []
    with serving(tmp_path / "docker.sock", _Engine) as url:
        yield docker.DockerClient(base_url=url, version="1.41", timeout=5)


def test_a_container_the_engine_cannot_find_is_not_left_behind(client):
    assert reaper.leftover_containers(client, RUN) == [REAL]  # STALE: listed, not found
    assert reaper.remove_run_containers(RUN, client) == 1  # at once: no wait on STALE
    assert _Engine.deletes == [REAL]
    assert reaper.leftover_containers(client, RUN) == []
