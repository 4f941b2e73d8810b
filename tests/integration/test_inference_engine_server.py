"""The embedded engine as a real subprocess server on loopback, driven over HTTP and the fleet."""

from __future__ import annotations

import asyncio
import re
import time

import httpx
import pytest
import torch
from swefleet.inference.config import InferenceConfig
from swefleet.inference.engine.settings import EngineSettings
from swefleet.inference.fleet import FleetClient
from swefleet.inference.launch import start_embedded_server
from swefleet.inference.protocol import CancelReason, RequestCancelled
from swefleet.inference.testing import perturbed_checkpoint, reference_logprobs

pytestmark = pytest.mark.integration

PROMPT = [11, 42, 7, 300, 5, 99]


@pytest.fixture(scope="module")
def ref_model(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


@pytest.fixture()
def http(server):
    with httpx.Client(base_url=server.url, trust_env=False, timeout=60) as client:
        yield client


def complete(http: httpx.Client, **body) -> dict:
    resp = http.post("/v1/completions", json=body)
    assert resp.status_code == 200, resp.text
    return resp.json()


def metric(text: str, name: str, labels: str = "") -> float:
    pattern = rf"^{re.escape(name)}\{{[^}}]*{re.escape(labels)}[^}}]*\}} (\S+)$"
    return sum(float(m) for m in re.findall(pattern, text, flags=re.MULTILINE))


def test_token_ids_and_logprobs_match_reference_forward(http, ref_model):
    data = complete(
        http,
        prompt=PROMPT,
        max_tokens=16,
        logprobs=0,
        seed=1,
        ignore_eos=True,
        return_token_ids=True,
    )
    choice = data["choices"][0]
    ids, lps = choice["token_ids"], choice["logprobs"]["token_logprobs"]
    assert len(ids) == len(lps) == 16 and choice["finish_reason"] == "length"
    assert choice["prompt_token_ids"] == PROMPT
    assert data["usage"] == {
        "prompt_tokens": 6,
        "completion_tokens": 16,
        "total_tokens": 22,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    assert data["policy_version"] == 0
    ref = reference_logprobs(ref_model, PROMPT, ids)
    assert max(abs(a - b) for a, b in zip(lps, ref, strict=True)) < 1e-4


def test_string_prompt_tokenize_and_text(http, model_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    text = "def add(a, b):\n    return"
    ids = http.post("/tokenize", json={"prompt": text}).json()["tokens"]
    assert ids == tok(text)["input_ids"]
    by_text = complete(http, prompt=text, max_tokens=8, temperature=0, ignore_eos=True)
    by_ids = complete(http, prompt=ids, max_tokens=8, temperature=0, ignore_eos=True)
    choice = by_text["choices"][0]
    assert choice["token_ids"] == by_ids["choices"][0]["token_ids"]
    assert choice["text"] == tok.decode(choice["token_ids"], skip_special_tokens=True)
    assert choice["logprobs"] is None  # not asked for


def test_bad_requests_get_400(http):
    assert http.post("/v1/completions", json={"prompt": [], "max_tokens": 2}).status_code == 400
    assert http.post("/v1/completions", json={"prompt": [1], "n": 2}).status_code == 400
    resp = http.post("/v1/completions", json={"prompt": [1], "stop": ["\n"], "top_k": 5})
    assert resp.status_code == 400 and "'stop', 'top_k'" in resp.text
    neutral = {"prompt": [1], "max_tokens": 1, "stop": [], "top_k": -1, "repetition_penalty": 1}
    assert http.post("/v1/completions", json=neutral).status_code == 200
    assert http.post("/v1/completions", json={"prompt": [[1], [2]]}).status_code == 400
    assert http.post("/v1/completions", json={"max_tokens": 2}).status_code == 400
    resp = http.post("/v1/completions", json={"prompt": [1], "max_tokens": 10**7})
    assert resp.status_code == 400 and "max_model_len" in resp.text
    hostile = [
        {"prompt": [1], "max_tokens": 0},
        {"prompt": [1], "max_tokens": -1},
        {"prompt": [1024], "max_tokens": 1},  # tiny model's vocab is 1024
        {"prompt": [-1], "max_tokens": 1},
        {"prompt": "", "max_tokens": 1},
        {"prompt": [1], "max_tokens": 1, "stream": True, "logprobs": 21},
    ]
    for body in hostile:
        assert http.post("/v1/completions", json=body).status_code == 400, body
    assert complete(http, prompt=[1], max_tokens=2, ignore_eos=True)["choices"][0]["token_ids"]
    assert http.get("/health").json()["status"] == "ok"  # the serving loop is unaffected


async def test_concurrent_requests_are_batched_and_match_single(server, http):
    prompts = [PROMPT[: 2 + i % 5] + [i] for i in range(8)]
    body = {"max_tokens": 24, "temperature": 0, "ignore_eos": True, "logprobs": 0}
    single = [complete(http, prompt=p, **body)["choices"][0] for p in prompts]
    before = http.get("/metrics").text
    async with httpx.AsyncClient(base_url=server.url, trust_env=False, timeout=60) as client:
        resps = await asyncio.gather(
            *(client.post("/v1/completions", json=dict(prompt=p, **body)) for p in prompts)
        )
    after = http.get("/metrics").text
    batched = [r.json()["choices"][0] for r in resps]
    for a, b in zip(single, batched, strict=True):
        assert a["token_ids"] == b["token_ids"]
        diffs = zip(a["logprobs"]["token_logprobs"], b["logprobs"]["token_logprobs"], strict=True)
        assert max(abs(x - y) for x, y in diffs) < 1e-4
    rows = metric(after, "swefleet:decode_rows_total") - metric(
        before, "swefleet:decode_rows_total"
    )
    steps = metric(after, "swefleet:decode_steps_total") - metric(
        before, "swefleet:decode_steps_total"
    )
    assert rows / steps > 2  # several sequences per decode step


@pytest.mark.parametrize("kv_mode,prefix_mb,cached", [
    ("static", 1024, 13), ("dynamic", 1024, 13), ("dynamic", 0, 0),
])  # fmt: skip
def test_prefix_cache_over_http(model_dir, ref_model, tmp_path, kv_mode, prefix_mb, cached):
    """Both KV caches: the second turn of a conversation reuses the first turn's K/V; the
    response says how many prompt tokens were cached and /metrics counts them as vLLM does.
    `prefix_cache_mb=0` turns the dynamic cache's reuse off."""
    log = tmp_path / f"{kv_mode}.log"
    with (
        start_embedded_server(
            EngineSettings(model_dir=model_dir, threads=1, max_batch_size=4, kv_mode=kv_mode,
                           kv_capacity=512, prefix_cache_mb=prefix_mb),
            log_path=log,
        ) as handle,
        httpx.Client(base_url=handle.url, trust_env=False, timeout=60) as http,
    ):
        body = {"max_tokens": 8, "temperature": 0, "ignore_eos": True, "logprobs": 0}
        first = complete(http, prompt=PROMPT, **body)
        turn2 = PROMPT + first["choices"][0]["token_ids"] + [3, 4]
        second = complete(http, prompt=turn2, **body)
        assert first["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
        assert second["usage"]["prompt_tokens_details"] == {"cached_tokens": cached}
        choice = second["choices"][0]
        ref = reference_logprobs(ref_model, turn2, choice["token_ids"])
        lps = choice["logprobs"]["token_logprobs"]
        assert max(abs(a - b) for a, b in zip(lps, ref, strict=True)) < 1e-4
        text = http.get("/metrics").text
        assert metric(text, "vllm:prefix_cache_queries_total") == 6 + len(turn2)
        assert metric(text, "vllm:prefix_cache_hits_total") == cached


def test_health_and_metrics(http):
    assert http.get("/health").json()["policy_version"] >= 0
    complete(http, prompt=PROMPT, max_tokens=3)
    text = http.get("/metrics").text
    assert metric(text, "swefleet:requests_total") >= 1
    assert metric(text, "vllm:generation_tokens_total") >= 3
    assert metric(text, "swefleet:requests_in_flight") == 0
    assert "swefleet:policy_version" in text


async def test_fleet_reads_the_servers_window_and_fits_the_agent_budget(server, http):
    from swefleet.agents.config import AgentConfig, fit_context_budget

    window = http.get("/v1/models").json()["data"][0]["max_model_len"]
    async with FleetClient([server.url, "http://127.0.0.1:9"], InferenceConfig()) as fleet:
        assert await fleet.max_model_len() == window  # the unreachable server is skipped
    agent = AgentConfig(context_budget_tokens=window * 2, max_tokens_per_turn=16)
    assert fit_context_budget(agent, window).context_budget_tokens == window


async def test_client_deadline_cancels_the_generation(server, http):
    """A client that gives up frees its batch slot: the server aborts the sequence."""
    before = metric(http.get("/metrics").text, "vllm:request_success_total", 'reason="abort"')
    async with httpx.AsyncClient(base_url=server.url, trust_env=False) as client:
        with pytest.raises(httpx.ReadTimeout):
            await client.post(
                "/v1/completions",
                timeout=0.5,
                json={"prompt": PROMPT, "max_tokens": 100_000, "ignore_eos": True},
            )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        text = http.get("/metrics").text
        if metric(text, "vllm:request_success_total", 'reason="abort"') > before:
            break
        await asyncio.sleep(0.1)
    assert metric(text, "vllm:request_success_total", 'reason="abort"') == before + 1
    assert metric(text, "swefleet:requests_in_flight") == 0


async def test_fleet_generate_update_weights_and_staleness(server, model_dir, ref_model, tmp_path):
    """Runs last in this module: it changes the served weights."""
    cfg = InferenceConfig(temperature=0.0, request_timeout_s=60)
    async with FleetClient([server.url], cfg) as fleet:
        before = await fleet.generate(PROMPT, max_tokens=12, episode_id="ep")
        ref = reference_logprobs(ref_model, PROMPT, before.completion_ids)
        assert max(abs(a - b) for a, b in zip(before.logprobs, ref, strict=True)) < 1e-4
        assert (before.policy_version, before.server) == (0, server.url)

        await fleet.update_weights(1, perturbed_checkpoint(model_dir, tmp_path / "v1"))
        assert await fleet.policy_version() == 1
        async with httpx.AsyncClient(trust_env=False) as client:
            assert (await client.get(f"{server.url}/health")).json()["policy_version"] == 1
        after = await fleet.generate(PROMPT, max_tokens=12, min_policy_version=1)
        assert after.policy_version == 1
        assert after.completion_ids != before.completion_ids

        with pytest.raises(RequestCancelled) as info:
            await fleet.generate(PROMPT, max_tokens=4, min_policy_version=2)
        assert info.value.reason == CancelReason.stale
        assert fleet.totals["drops/stale"] == 1  # refused before any server was tried
        assert fleet.server_metrics()[server.url]["drops"] == {}
