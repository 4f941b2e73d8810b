"""inference.chat_client.ChatClient against the real scripted chat server on loopback: replies
and usage, the bearer key, retries (429 with Retry-After, 5xx, refused connections), and one
typed `RequestCancelled` for every failure (timeout, overload, server_error)."""

from __future__ import annotations

import socket
import sys
import time
from pathlib import Path

import pytest
from swefleet.inference.chat_client import ChatClient
from swefleet.inference.config import InferenceConfig
from swefleet.inference.protocol import CancelReason, RequestCancelled

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ holds shared helpers
from chat_server import chat_server, requests_seen

pytestmark = pytest.mark.unit

KEY = "sk-test-not-a-real-key"
HELLO = [{"role": "user", "content": "hello"}]


def client(url: str, **cfg) -> ChatClient:
    config = InferenceConfig(**{"retry_backoff_s": 0.01, "request_timeout_s": 10.0, **cfg})
    return ChatClient(url, "policy", config, api_key=KEY)


async def test_reply_usage_model_key_and_tools_are_sent_and_read():
    tools = [{"type": "function", "function": {"name": "submit", "parameters": {}}}]
    with chat_server([{"content": "hi there"}], served="policy") as url:
        async with client(url, temperature=0.5, max_tokens_per_turn=64) as chat:
            reply = await chat.chat(HELLO, max_tokens=100, tools=tools)
        (seen,) = requests_seen(url)
    assert reply.content == "hi there" and reply.finish_reason == "stop"
    assert reply.model == "policy" and reply.prompt_tokens > 0 and reply.completion_tokens > 0
    assert reply.message() == {"role": "assistant", "content": "hi there"}
    assert seen["authorization"] == f"Bearer {KEY}"
    body = seen["body"]
    assert body["model"] == "policy" and body["messages"] == HELLO and body["tools"] == tools
    assert body["max_tokens"] == 64 and body["temperature"] == 0.5  # capped by the config


async def test_native_tool_call_is_returned_verbatim():
    call = {"name": "bash", "arguments": '{"command": "ls"'}  # invalid JSON: not judged here
    with chat_server([{"tool_call": call}]) as url:
        async with client(url) as chat:
            reply = await chat.chat(HELLO, max_tokens=10)
    assert reply.finish_reason == "tool_calls"
    assert reply.tool_calls[0]["function"] == call
    assert reply.message()["tool_calls"] == reply.tool_calls


async def test_429_waits_its_retry_after_then_succeeds():
    with chat_server([{"status": 429, "retry_after": 0.3}, {"content": "ok"}]) as url:
        async with client(url) as chat:
            t0 = time.monotonic()
            reply = await chat.chat(HELLO, max_tokens=10)
            waited = time.monotonic() - t0
        assert len(requests_seen(url)) == 2
    assert reply.content == "ok" and chat.totals["retries"] == 1 and waited >= 0.3


@pytest.mark.parametrize(
    "step,reason,requests",
    [
        ({"status": 429}, CancelReason.overload, 3),  # retry budget 2: three requests
        ({"status": 503}, CancelReason.overload, 3),
        ({"status": 500}, CancelReason.server_error, 3),
        ({"status": 400}, CancelReason.server_error, 1),  # a 4xx is never retried
        ({"status": 401}, CancelReason.server_error, 1),
        ({"truncated": True}, CancelReason.server_error, 1),
        ({"status": 429, "retry_after": 60}, CancelReason.overload, 1),  # longer than time left
    ],
)
async def test_failures_end_in_one_typed_cancel(step, reason, requests):
    with chat_server([step]) as url:
        async with client(url) as chat:
            with pytest.raises(RequestCancelled) as caught:
                await chat.chat(HELLO, max_tokens=10)
        assert len(requests_seen(url)) == requests
    assert caught.value.reason == reason
    assert KEY not in str(caught.value) and chat.totals[f"drops/{reason.value}"] == 1


async def test_slow_reply_times_out_and_is_not_retried():
    with chat_server([{"content": "late", "delay_s": 2.0}]) as url:
        async with client(url, request_timeout_s=0.3, connect_timeout_s=0.3) as chat:
            with pytest.raises(RequestCancelled) as caught:
                await chat.chat(HELLO, max_tokens=10)
        assert len(requests_seen(url)) == 1
    assert caught.value.reason == CancelReason.timeout


async def test_refused_connection_is_retried_then_a_server_error():
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    async with client(url) as chat:
        with pytest.raises(RequestCancelled) as caught:
            await chat.chat(HELLO, max_tokens=10)
    assert caught.value.reason == CancelReason.server_error and chat.totals["retries"] == 2
