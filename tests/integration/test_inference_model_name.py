"""The embedded engine serves the model names its /v1/models lists and answers any other
`model` as vLLM does (404 NotFoundError); the fleet sends the configured name, and a 404 ends
the request at once with a clear error (no retry, no hang)."""

from __future__ import annotations

import time

import httpx
import pytest
from swefleet.inference.config import InferenceConfig
from swefleet.inference.engine.settings import EngineSettings
from swefleet.inference.fleet import FleetClient
from swefleet.inference.launch import start_embedded_server
from swefleet.inference.protocol import CancelReason, RequestCancelled
from swefleet.inference.testing import tiny_checkpoint

pytestmark = pytest.mark.integration
SERVED = "policy"
BODY = {"prompt": [11, 42, 7], "max_tokens": 2, "ignore_eos": True}


def not_found(name: str) -> dict:
    """vLLM 0.26's answer for a model it does not serve (`OpenAIServingModels.check_model`)."""
    return {"error": {"message": f"The model `{name}` does not exist.", "type": "NotFoundError",
                      "param": "model", "code": 404}}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.getbasetemp() / "inference-models")


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    cfg = InferenceConfig(model_name=SERVED, cpu_threads=1, max_batch_size=4)
    log = tmp_path_factory.mktemp("model-name-logs") / "server.log"
    settings = EngineSettings.from_inference(cfg, model_dir)
    with start_embedded_server(settings, log, startup_timeout_s=cfg.startup_timeout_s) as handle:
        yield handle


@pytest.fixture()
def http(server):
    with httpx.Client(base_url=server.url, trust_env=False, timeout=60) as client:
        yield client


def test_models_lists_the_configured_name(http):
    assert [card["id"] for card in http.get("/v1/models").json()["data"]] == [SERVED]


@pytest.mark.parametrize("stream", [False, True])
def test_the_served_name_or_none_is_answered_any_other_is_404(http, model_dir, stream):
    for model in (SERVED, None, ""):
        resp = http.post("/v1/completions", json={**BODY, "model": model, "stream": stream})
        assert resp.status_code == 200, (model, resp.text)
        if not stream:
            assert resp.json()["model"] == SERVED
    # the checkpoint directory's name is no alias once a served name is set (as in vLLM)
    for model in ("gpt-4", model_dir.name, str(model_dir), "Policy"):
        resp = http.post("/v1/completions", json={**BODY, "model": model, "stream": stream})
        assert resp.status_code == 404, (model, resp.text)
        assert resp.json() == not_found(model)
    assert http.get("/health").json()["status"] == "ok"


async def test_fleet_sends_the_served_name(server):
    async with FleetClient([server.url], InferenceConfig(model_name=SERVED)) as fleet:
        done = await fleet.generate([11, 42, 7], max_tokens=2)
    assert len(done.completion_ids) >= 1


@pytest.mark.parametrize("first_token_timeout_s", [None, 30.0])
async def test_an_unknown_name_fails_the_request_at_once_with_the_servers_message(
        server, first_token_timeout_s):
    cfg = InferenceConfig(model_name="not-served", retry_budget=5,
                          first_token_timeout_s=first_token_timeout_s)
    async with FleetClient([server.url], cfg) as fleet:
        t0 = time.monotonic()
        with pytest.raises(RequestCancelled) as caught:
            await fleet.generate([11, 42, 7], max_tokens=2)
        assert time.monotonic() - t0 < 5
        assert caught.value.reason == CancelReason.server_error
        assert "HTTP 404" in str(caught.value)
        assert "The model `not-served` does not exist." in str(caught.value)
        assert fleet.totals["retries"] == 0
