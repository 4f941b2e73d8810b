"""Hostile requests to the scripted server (a real subprocess on loopback): clear 4xx answers,
no 500, no stall, and the server keeps serving."""

from __future__ import annotations

import time

import httpx
import pytest
from swefleet.inference.launch import start_scripted_server
from swefleet.inference.scripted_server import MAX_MODEL_LEN

pytestmark = pytest.mark.integration


def test_scripted_server_refuses_what_it_cannot_serve(tmp_path):
    bad = {
        "empty prompt": {"prompt": [], "max_tokens": 2},
        "empty string": {"prompt": "", "max_tokens": 2},
        "batch": {"prompt": [[1], [2]], "max_tokens": 2},
        "huge max_tokens": {"prompt": [1, 2], "max_tokens": MAX_MODEL_LEN},
    }
    with (
        start_scripted_server(log_path=tmp_path / "s.log") as server,
        httpx.Client(base_url=server.url, trust_env=False, timeout=10) as http,
    ):
        for name, body in bad.items():
            t0 = time.monotonic()
            resp = http.post("/v1/completions", json=body)
            assert resp.status_code == 400, (name, resp.status_code, resp.text[:200])
            assert time.monotonic() - t0 < 2.0, name
        assert "max_model_len" in resp.text
        ok = http.post("/v1/completions", json={"prompt": [5], "max_tokens": 3, "logprobs": 0})
        assert ok.status_code == 200 and ok.json()["choices"][0]["token_ids"] == [6, 7, 8]
        assert http.get("/stats").json()["completions"] == 1  # the refused ones never ran
