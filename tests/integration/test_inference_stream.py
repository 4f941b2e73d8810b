"""Streamed completions (`stream: true`) and the fleet's first-token deadline, against real
loopback servers: the embedded engine (tiny model), the scripted server, a hung raw server."""

from __future__ import annotations

import asyncio
import json
import re
import time

import httpx
import pytest
from swefleet.inference.config import InferenceConfig
from swefleet.inference.engine.settings import EngineSettings
from swefleet.inference.fleet import FleetClient
from swefleet.inference.launch import start_embedded_server, start_scripted_server
from swefleet.inference.protocol import CancelReason, RequestCancelled
from swefleet.inference.testing import RawServer, tiny_checkpoint
from swefleet.inference.wire import CompletionStreamResponse

pytestmark = pytest.mark.integration

PROMPT = [11, 42, 7, 300, 5, 99]
HANG = 777


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    model = tiny_checkpoint(tmp_path_factory.getbasetemp() / "inference-models")
    log = tmp_path_factory.mktemp("stream-logs") / "engine.log"
    # no prefix reuse: the streamed request resends the unstreamed one's prompt, and a prefix
    # hit computes the same logprobs in another order (equal within ~1e-6, not bit for bit)
    settings = EngineSettings(model_dir=model, threads=1, max_batch_size=4, prefix_cache_mb=0)
    with start_embedded_server(settings, log_path=log) as handle:
        yield handle


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    log = tmp_path_factory.mktemp("stream-logs") / "scripted.log"
    with start_scripted_server(log_path=log, hang_token=HANG, token_delay_s=0.02) as handle:
        yield handle


def metric(url: str, name: str, labels: str = "") -> float:
    text = httpx.get(f"{url}/metrics", trust_env=False).text
    pattern = rf"^{re.escape(name)}\{{[^}}]*{re.escape(labels)}[^}}]*\}} (\S+)$"
    return sum(float(m) for m in re.findall(pattern, text, flags=re.MULTILINE))


def completions(server) -> int:
    return httpx.get(f"{server.url}/stats", trust_env=False).json()["completions"]


def stream_lines(url: str, body: dict) -> list[str]:
    with (
        httpx.Client(trust_env=False, timeout=60) as http,
        http.stream("POST", f"{url}/v1/completions", json={**body, "stream": True}) as resp,
    ):
        assert resp.status_code == 200 and resp.headers["content-type"].startswith(
            "text/event-stream"
        )
        return [line for line in resp.iter_lines() if line]


def unstreamed(url: str, body: dict) -> dict:
    resp = httpx.post(f"{url}/v1/completions", json=body, trust_env=False, timeout=60)
    assert resp.status_code == 200, resp.text
    return resp.json()


async def wait_metric(url: str, name: str, want: float, labels: str = "") -> float:
    deadline = time.monotonic() + 10
    while (value := metric(url, name, labels)) != want and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return value


@pytest.mark.parametrize("sampling", [{"temperature": 0}, {"temperature": 1.0, "seed": 5}])
def test_engine_stream_matches_unstreamed(engine, sampling):
    body = {
        "prompt": PROMPT,
        "max_tokens": 24,
        "logprobs": 2,
        "return_token_ids": True,
        "ignore_eos": True,
        **sampling,
    }
    full = unstreamed(engine.url, body)
    lines = stream_lines(engine.url, {**body, "stream_options": {"include_usage": True}})
    assert lines[-1] == "data: [DONE]" and all(line.startswith("data: ") for line in lines)
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    for chunk in chunks:
        CompletionStreamResponse.model_validate(chunk)
    *token_chunks, usage_chunk = chunks
    assert usage_chunk["choices"] == [] and usage_chunk["usage"] == full["usage"]
    assert len({c["id"] for c in chunks}) == 1
    choices = [c["choices"][0] for c in token_chunks]
    assert choices[0]["prompt_token_ids"] == PROMPT  # first chunk only, as vLLM
    assert all(c["prompt_token_ids"] is None for c in choices[1:])
    assert [c["finish_reason"] for c in choices] == [None] * (len(choices) - 1) + ["length"]
    want = full["choices"][0]
    assert [t for c in choices for t in c["token_ids"]] == want["token_ids"]
    for key in ("token_logprobs", "tokens", "top_logprobs"):
        assert [x for c in choices for x in c["logprobs"][key]] == want["logprobs"][key]
    assert "".join(c["text"] for c in choices) == want["text"]
    last = token_chunks[-1]
    assert (last["policy_version"], last["policy_version_final"]) == (0, 0)
    assert last["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}
    assert all("policy_version" not in c and "usage" not in c for c in token_chunks[:-1])


def test_engine_stream_rejects_what_unstreamed_rejects(engine):
    with httpx.Client(trust_env=False, timeout=30) as http:
        url = f"{engine.url}/v1/completions"
        bad = http.post(url, json={"prompt": [1], "max_tokens": 10**7, "stream": True})
        assert bad.status_code == 400 and "max_model_len" in bad.text
        opts = {"prompt": [1], "stream_options": {"include_usage": True}}
        assert http.post(url, json=opts).status_code == 400  # options without stream, as vLLM


@pytest.mark.parametrize("streamed", [{"first_token_timeout_s": 30.0}, {"stream": True}])
async def test_fleet_streamed_completion_equals_unstreamed(engine, scripted, streamed):
    """Same prompt, greedy: the streamed path (a first-token deadline, or `stream` alone)
    assembles exactly the completion of the unstreamed one, against the engine and the scripted
    server."""
    for server, stop in ((engine, []), (scripted, [PROMPT[-1] + 5])):
        base = {"request_timeout_s": 60.0, "temperature": 0.0, "stop_token_ids": stop}
        async with (
            FleetClient([server.url], InferenceConfig(**base)) as plain,
            FleetClient([server.url], InferenceConfig(**base, **streamed)) as fast,
        ):
            a = await plain.generate(PROMPT, max_tokens=16)
            b = await fast.generate(PROMPT, max_tokens=16)
        assert b.completion_ids == a.completion_ids and len(a.completion_ids) > 0
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-5
        assert (b.finish_reason, b.policy_version) == (a.finish_reason, a.policy_version)
        for key in ("policy_version_final", "prompt_tokens", "stop_reason"):
            assert b.extra[key] == a.extra[key], key
        assert 0 < b.extra["first_token_s"] <= b.latency_s and "first_token_s" not in a.extra
    assert a.finish_reason == "stop" and len(a.completion_ids) == 5  # the scripted stop id


async def test_first_token_deadline_on_hung_stream(scripted):
    """Headers arrive, no token does: `timeout` well before the total deadline, no retry."""
    before = completions(scripted)
    cfg = InferenceConfig(request_timeout_s=20.0, first_token_timeout_s=0.4, retry_budget=3)
    async with FleetClient([scripted.url], cfg) as fleet:
        t0 = time.monotonic()
        with pytest.raises(RequestCancelled) as info:
            await fleet.generate([HANG, 1, 2], max_tokens=4)
        elapsed = time.monotonic() - t0
        assert info.value.reason == CancelReason.timeout and "first token" in str(info.value)
        assert 0.35 < elapsed < 2.0
        assert fleet.totals["retries"] == 0 and fleet.totals["drops/timeout"] == 1
        assert fleet.server_metrics()[scripted.url]["drops"] == {"timeout": 1}
        # a slow stream whose first token is in time completes past the first-token deadline
        slow = await fleet.generate([3, 4], max_tokens=30)  # 30 tokens x 0.02 s > 0.4 s
        assert len(slow.completion_ids) == 30 and slow.latency_s > 0.4
        empty = await fleet.generate([3, 4], max_tokens=0)  # a stream with no token finishes
        assert (empty.completion_ids, empty.finish_reason) == ([], "length")
    assert completions(scripted) == before + 3  # the hung request was sent once


async def test_first_token_deadline_on_server_that_never_answers():
    cfg = InferenceConfig(request_timeout_s=20.0, first_token_timeout_s=0.3, retry_budget=3)
    async with RawServer(status=None) as hung, FleetClient([hung.url], cfg) as fleet:
        t0 = time.monotonic()
        with pytest.raises(RequestCancelled) as info:
            await fleet.generate([1, 2, 3], max_tokens=4)
        assert info.value.reason == CancelReason.timeout
        assert time.monotonic() - t0 < 1.5
        assert (hung.requests, fleet.totals["retries"]) == (1, 0)


async def test_client_leaving_a_stream_frees_the_engine_slot(engine):
    """Raw HTTP reader that disconnects mid-stream, then a fleet call cancelled mid-stream:
    each time the engine aborts the sequence and its running count returns to 0."""
    url = engine.url
    aborts = metric(url, "vllm:request_success_total", 'reason="abort"')
    body = {"prompt": PROMPT, "max_tokens": 100_000, "ignore_eos": True, "stream": True}
    async with (
        httpx.AsyncClient(trust_env=False, timeout=30) as http,
        http.stream("POST", f"{url}/v1/completions", json=body) as resp,
    ):
        async for line in resp.aiter_lines():
            if line.startswith("data: "):
                break
        assert metric(url, "vllm:num_requests_running") == 1
    assert await wait_metric(url, "vllm:num_requests_running", 0) == 0
    assert metric(url, "vllm:request_success_total", 'reason="abort"') == aborts + 1

    # greedy: the fleet sends no `ignore_eos`, and a sampled EOS (1 in ~1000 per token for the
    # random model) would end the request before it can be cancelled; greedy never picks it here
    cfg = InferenceConfig(
        request_timeout_s=60.0, first_token_timeout_s=10.0, max_tokens_per_turn=100_000,
        temperature=0.0,
    )
    async with FleetClient([url], cfg) as fleet:
        task = asyncio.create_task(fleet.generate(PROMPT, max_tokens=100_000))
        assert await wait_metric(url, "vllm:num_requests_running", 1) == 1
        await asyncio.sleep(0.3)  # tokens are flowing
        assert not task.done(), task.result()  # still streaming (no EOS)
        assert fleet.servers[0].in_flight == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert fleet.servers[0].in_flight == 0
    assert await wait_metric(url, "vllm:num_requests_running", 0) == 0
    assert metric(url, "vllm:request_success_total", 'reason="abort"') == aborts + 2
