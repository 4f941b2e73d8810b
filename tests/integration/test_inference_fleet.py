"""The fleet client against real loopback servers: scripted subprocess servers, a hung server,
a server answering 503, a refused port, a killed server."""

from __future__ import annotations

import socket
import time

import httpx
import pytest
from swefleet.inference.config import InferenceConfig
from swefleet.inference.fleet import FleetClient, WeightUpdateError
from swefleet.inference.launch import start_scripted_server
from swefleet.inference.protocol import CancelReason, RequestCancelled
from swefleet.inference.testing import RawServer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    logs = tmp_path_factory.mktemp("scripted-logs")
    with (
        start_scripted_server(log_path=logs / "a.log") as a,
        start_scripted_server(log_path=logs / "b.log") as b,
    ):
        yield a, b


def cfg(**overrides) -> InferenceConfig:
    base = {
        "request_timeout_s": 5.0,
        "connect_timeout_s": 0.5,
        "retry_budget": 2,
        "retry_backoff_s": 0.01,
        "server_cooldown_s": 30.0,
    }
    return InferenceConfig(**{**base, **overrides})


def refused_url() -> str:
    with socket.socket() as s:  # bound, never listening: connections are refused
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def completions(server) -> int:
    return httpx.get(f"{server.url}/stats", trust_env=False).json()["completions"]


async def test_generate_returns_exact_tokens(scripted):
    a, _ = scripted
    async with FleetClient([a.url], cfg()) as fleet:
        c = await fleet.generate([5, 9], max_tokens=4, episode_id="e1")
    assert c.completion_ids == [10, 11, 12, 13] and c.logprobs == [-0.5] * 4
    assert (c.finish_reason, c.policy_version, c.server) == ("length", 0, a.url)
    assert c.latency_s > 0 and c.extra["retries"] == 0


async def test_hung_server_hits_the_deadline_without_retry():
    async with (
        RawServer(status=None) as hung,
        FleetClient([hung.url], cfg(request_timeout_s=0.6)) as fleet,
    ):
        t0 = time.monotonic()
        with pytest.raises(RequestCancelled) as info:
            await fleet.generate([1, 2, 3], max_tokens=8)
        elapsed = time.monotonic() - t0
        assert info.value.reason == CancelReason.timeout
        assert 0.5 < elapsed < 2.0
        assert (hung.requests, hung.connections) == (1, 1)  # never retried
        assert fleet.totals["retries"] == 0 and fleet.totals["drops/timeout"] == 1
        assert fleet.server_metrics()[hung.url]["drops"] == {"timeout": 1}


async def test_timed_out_generation_is_not_retried_elsewhere(scripted):
    _, b = scripted
    start = completions(b)
    async with (
        RawServer(status=None) as hung,
        FleetClient([hung.url, b.url], cfg(request_timeout_s=0.6)) as fleet,
    ):
        hung_first = None
        for i in range(4):  # both servers idle: the episode lands on either; find the hung one
            try:
                await fleet.generate([1, i], max_tokens=2, episode_id=f"e{i}")
            except RequestCancelled as exc:
                assert exc.reason == CancelReason.timeout
                hung_first = i
                break
        assert hung_first is not None
        assert completions(b) - start == hung_first  # the timed-out one never reached b
        assert fleet.totals["retries"] == 0


async def test_connection_refused_is_retried_and_counted():
    async with FleetClient([refused_url()], cfg(retry_budget=3)) as fleet:
        with pytest.raises(RequestCancelled) as info:
            await fleet.generate([1], max_tokens=2)
    assert info.value.reason == CancelReason.server_error
    assert fleet.totals["retries"] == 3
    assert next(iter(fleet.server_metrics().values()))["failures"] == 4


async def test_503_is_retried_then_overload():
    async with RawServer(status=503) as busy, FleetClient([busy.url], cfg(retry_budget=2)) as fleet:
        with pytest.raises(RequestCancelled) as info:
            await fleet.generate([1], max_tokens=2)
        assert info.value.reason == CancelReason.overload
        assert busy.requests == 3 and fleet.totals["retries"] == 2


async def test_other_http_errors_are_not_retried():
    async with RawServer(status=500) as broken, FleetClient([broken.url], cfg()) as fleet:
        with pytest.raises(RequestCancelled) as info:
            await fleet.generate([1], max_tokens=2)
        assert info.value.reason == CancelReason.server_error
        assert broken.requests == 1 and fleet.totals["retries"] == 0


async def test_killed_server_fails_over(tmp_path):
    with (
        start_scripted_server(log_path=tmp_path / "x.log") as x,
        start_scripted_server(log_path=tmp_path / "y.log") as y,
    ):
        async with FleetClient([x.url, y.url], cfg()) as fleet:
            first = await fleet.generate([1, 2], max_tokens=3, episode_id="ep")
            victim = x if first.server == x.url else y
            survivor = y if victim is x else x
            victim.kill()
            again = await fleet.generate([1, 2, 3], max_tokens=3, episode_id="ep")
            assert again.server == survivor.url
            assert again.extra["retries"] == 1 and fleet.totals["retries"] == 1
            metrics = fleet.server_metrics()
            assert metrics[victim.url]["failures"] == 1 and not metrics[victim.url]["live"]
            later = await fleet.generate([4], max_tokens=3)  # the dead one is skipped now
            assert later.server == survivor.url and later.extra["retries"] == 0


async def test_stale_requests_are_dropped_until_weights_update(scripted, tmp_path):
    a, b = scripted
    async with FleetClient([a.url, b.url], cfg()) as fleet:
        await fleet.update_weights(0, tmp_path)  # both servers at a known version
        with pytest.raises(RequestCancelled) as info:
            await fleet.generate([1], max_tokens=2, min_policy_version=3)
        assert info.value.reason == CancelReason.stale
        assert fleet.totals["drops/stale"] == 1
        await fleet.update_weights(3, tmp_path)
        assert await fleet.policy_version() == 3
        c = await fleet.generate([1], max_tokens=2, min_policy_version=3)
        assert c.policy_version == 3
        await fleet.update_weights(0, tmp_path)  # leave the shared servers as found


async def test_update_weights_reports_a_dead_server(scripted, tmp_path):
    a, _ = scripted
    async with FleetClient([a.url, refused_url()], cfg()) as fleet:
        with pytest.raises(WeightUpdateError, match="1 server"):
            await fleet.update_weights(1, tmp_path)
    async with FleetClient([a.url], cfg()) as fleet:
        await fleet.update_weights(0, tmp_path)


async def test_latency_metrics_and_least_loaded_spread(scripted):
    a, b = scripted
    import asyncio

    async with FleetClient([a.url, b.url], cfg()) as fleet:
        done = await asyncio.gather(*(fleet.generate([i], max_tokens=2) for i in range(40)))
        per_server = fleet.server_metrics()
        flat = fleet.metrics()
    assert {c.server for c in done} == {a.url, b.url}
    assert sum(m["completed"] for m in per_server.values()) == 40
    for m in per_server.values():
        assert 0 < m["latency_p50_s"] <= m["latency_p99_s"]
        assert m["in_flight"] == 0
    assert flat["infer/completed"] == 40 and flat["infer/in_flight"] == 0
