"""The fleet client against loopback servers whose 200 answers break the wire contract, or
that do not speak HTTP at all: every one ends as `RequestCancelled(server_error)`, counted as a
drop, never another exception type (streamed or not); a `/health` answer that cannot be read
marks the server down."""

from __future__ import annotations

import pytest
from swefleet.inference.config import InferenceConfig
from swefleet.inference.fleet import FleetClient
from swefleet.inference.protocol import CancelReason, RequestCancelled
from swefleet.inference.testing import HeadReplyServer, RawServer

pytestmark = pytest.mark.integration

OK_CHOICE = b'{"token_ids": [1], "logprobs": {"token_logprobs": [-0.1]}, "finish_reason": "stop"}'

MALFORMED = {
    "not json": b"<html>oops</html>",
    "json list": b"[1, 2]",
    "no choices field": b"{}",
    "empty choices": b'{"choices": []}',
    "version not int": b'{"choices": [' + OK_CHOICE + b'], "policy_version": "v3"}',
    "nan logprob": b'{"choices": [{"token_ids": [1, 2], "logprobs": {"token_logprobs": [-0.1, '
    b'NaN]}, "finish_reason": "stop"}]}',
    "infinite logprob": b'{"choices": [{"token_ids": [1], "logprobs": {"token_logprobs": '
    b'[-Infinity]}, "finish_reason": "stop"}]}',
}

MALFORMED_STREAMS = {
    "chunk is a number": b"data: 5\n\n",
    "chunk is a list": b"data: [1]\n\n",
    "choice is a number": b'data: {"choices": [5]}\n\n',
    "token_ids a string": b'data: {"choices": [{"token_ids": "ab", "logprobs": {"token_logprobs"'
    b': [-0.1, -0.2]}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n',
    "token_logprobs a number": b'data: {"choices": [{"token_ids": [1], "logprobs": '
    b'{"token_logprobs": 5}, "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n',
    "version not int": b'data: {"choices": [' + OK_CHOICE + b'], "policy_version": "v3"}\n\n'
    b"data: [DONE]\n\n",
    "nan logprob": b'data: {"choices": [{"token_ids": [1], "logprobs": {"token_logprobs": [NaN]}'
    b', "finish_reason": "stop"}]}\n\ndata: [DONE]\n\n',
}


def cfg(**overrides) -> InferenceConfig:
    base = {"request_timeout_s": 5.0, "connect_timeout_s": 0.5, "retry_budget": 1}
    return InferenceConfig(**{**base, **overrides})


async def dropped(body: bytes, config: InferenceConfig) -> RequestCancelled:
    async with RawServer(status=200, body=body) as server, FleetClient([server.url], config) as f:
        with pytest.raises(RequestCancelled) as info:
            await f.generate([1, 2], max_tokens=4, episode_id="e")
        assert f.totals["drops/server_error"] == 1 and f.totals.get("completed", 0) == 0
        assert f.server_metrics()[server.url]["drops"] == {"server_error": 1}
        assert server.requests == 1  # a malformed answer is not retried
    return info.value


@pytest.mark.parametrize("body", MALFORMED.values(), ids=MALFORMED.keys())
async def test_malformed_answer_is_a_counted_server_error(body):
    error = await dropped(body, cfg())
    assert error.reason == CancelReason.server_error


@pytest.mark.parametrize("body", MALFORMED_STREAMS.values(), ids=MALFORMED_STREAMS.keys())
async def test_malformed_stream_is_a_counted_server_error(body):
    error = await dropped(body, cfg(first_token_timeout_s=2.0))
    assert error.reason == CancelReason.server_error


async def test_unreadable_health_answer_marks_the_server_down():
    config = cfg(server_cooldown_s=30.0)
    async with (
        RawServer(status=200, body=b"garbage") as server,
        FleetClient([server.url], config) as f,
    ):
        assert await f.policy_version() == 0
        assert (await f.refresh(max_age_s=0)) == {server.url: None}
        assert f.metrics()["infer/live_servers"] == 0.0


NOT_HTTP = {
    "bad status line": b"garbage\r\n\r\n",
    "bad content-length": b"HTTP/1.1 200 OK\r\ncontent-length: abc\r\n\r\n{}",
    "oversized header": b"HTTP/1.1 200 OK\r\nx: " + b"a" * 100_000 + b"\r\n\r\n",
}


@pytest.mark.parametrize("stream", [False, True], ids=["unstreamed", "streamed"])
@pytest.mark.parametrize("reply", NOT_HTTP.values(), ids=NOT_HTTP.keys())
async def test_server_not_speaking_http_is_retried_then_dropped(reply, stream):
    config = cfg(
        retry_budget=1, retry_backoff_s=0.01, first_token_timeout_s=2.0 if stream else None
    )
    async with HeadReplyServer(reply) as server, FleetClient([server.url], config) as fleet:
        with pytest.raises(RequestCancelled) as info:
            await fleet.generate([1, 2], max_tokens=4)
        assert info.value.reason == CancelReason.server_error
        assert "ConnectionLost" in info.value.detail
        assert server.requests == 2 and fleet.totals["retries"] == 1
        assert fleet.totals["drops/server_error"] == 1
        assert not fleet.server_metrics()[server.url]["live"]  # cooling down
        assert await fleet.policy_version() == 0  # /health: not HTTP either, no exception
        await fleet.scrape_metrics()  # /metrics: neither; the poll shrugs it off
