"""The fleet client's aiohttp transport against raw loopback sockets: a connection closed before
the answer is retried (and counted), tenacity's backoff runs between attempts, a server that
answers after the deadline ends as `timeout`."""

from __future__ import annotations

import time

import pytest
from swefleet.inference.config import InferenceConfig
from swefleet.inference.fleet import FleetClient
from swefleet.inference.protocol import CancelReason, RequestCancelled
from swefleet.inference.testing import HeadReplyServer, RawServer
from swefleet.inference.transport import ConnectFailed, ConnectionLost, Transport

pytestmark = pytest.mark.integration


def cfg(**overrides) -> InferenceConfig:
    base = {"request_timeout_s": 5.0, "connect_timeout_s": 0.5, "server_cooldown_s": 0.0}
    return InferenceConfig(**{**base, **overrides})


async def test_connection_closed_before_the_answer_is_retried_with_backoff():
    async with HeadReplyServer() as closing:
        config = cfg(retry_budget=2, retry_backoff_s=0.2)
        async with FleetClient([closing.url], config) as fleet:
            t0 = time.monotonic()
            with pytest.raises(RequestCancelled) as info:
                await fleet.generate([1, 2], max_tokens=2)
            elapsed = time.monotonic() - t0
            assert fleet.totals["retries"] == 2
        assert closing.requests == 3
    assert info.value.reason == CancelReason.server_error
    assert "ConnectionLost" in info.value.detail
    assert 0.6 <= elapsed < 3.0  # backoff 0.2 s then 0.4 s


async def test_no_retry_budget_means_one_attempt():
    async with HeadReplyServer() as closing, FleetClient([closing.url], cfg(retry_budget=0)) as f:
        with pytest.raises(RequestCancelled):
            await f.generate([1], max_tokens=2)
        assert closing.requests == 1 and f.totals["retries"] == 0


async def test_transport_maps_failures():
    transport = Transport(max_connections=4, connect_timeout_s=0.5)
    try:
        async with HeadReplyServer() as closing:
            with pytest.raises(ConnectionLost):
                await transport.post(f"{closing.url}/v1/completions", json={"prompt": [1]})
            url = closing.url
        with pytest.raises(ConnectFailed):  # closed listener: refused
            await transport.get(f"{url}/health")
        async with RawServer(status=None) as hung:
            with pytest.raises(TimeoutError):
                await transport.get(f"{hung.url}/metrics", timeout_s=0.3)
        async with RawServer(status=503) as busy:
            resp = await transport.post(f"{busy.url}/v1/completions", json={"prompt": [1]})
            assert resp.status_code == 503 and resp.json()["error"]["message"]
    finally:
        await transport.aclose()
