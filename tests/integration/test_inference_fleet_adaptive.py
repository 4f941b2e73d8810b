"""Fleet client features against loopback scripted servers: adaptive concurrency from the
`vllm:kv_cache_usage_perc` gauge, per-version `cache_salt`, and weight updates through vLLM
0.26's dev routes (`server_api="vllm"`, emulated by the scripted server)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from swefleet.inference.config import ConcurrencyConfig, InferenceConfig
from swefleet.inference.fleet import FleetClient
from swefleet.inference.launch import start_scripted_server

pytestmark = pytest.mark.integration


def stats(server) -> dict:
    return httpx.get(f"{server.url}/stats", trust_env=False).json()


def cfg(**overrides) -> InferenceConfig:
    base = {"request_timeout_s": 30.0, "connect_timeout_s": 1.0}
    return InferenceConfig(**{**base, **overrides})


AIMD = ConcurrencyConfig(
    enabled=True,
    initial_inflight=4,
    min_inflight=1,
    max_inflight=64,
    poll_interval_s=0.05,
    increase=2.0,
    grow_below=0.5,
    cut_above=0.8,
    cooldown_s=0.3,
)


async def burst(fleet: FleetClient, n: int) -> None:
    done = await asyncio.gather(
        *(fleet.generate([i + 1], max_tokens=2, episode_id=f"e{i}") for i in range(n))
    )
    assert len(done) == n


async def test_aimd_keeps_in_flight_under_the_kv_capacity(tmp_path):
    # usage = in-flight / 16: a burst of 120 at once would fill it 7 times over
    with start_scripted_server(delay_s=0.15, kv_capacity=16, log_path=tmp_path / "s.log") as s:
        async with FleetClient([s.url], cfg(concurrency=AIMD)) as fleet:
            await burst(fleet, 120)
            limit = fleet.server_metrics()[s.url]["inflight_limit"]
            waits = fleet.totals["concurrency_waits"]
            polls = fleet.totals["metrics_polls"]
        peak = stats(s)["peak_in_flight"]
    assert polls > 3 and waits > 50
    assert 4 < peak <= 15, peak  # grew past the initial 4, never filled the cache (16)
    assert 1 <= limit <= 15


async def test_server_without_gauge_is_not_limited(tmp_path):
    with start_scripted_server(delay_s=0.3, log_path=tmp_path / "s.log") as s:
        async with FleetClient([s.url], cfg(concurrency=AIMD)) as fleet:
            await burst(fleet, 4)  # the first poll runs meanwhile
            await asyncio.sleep(0.1)
            assert fleet.server_metrics()[s.url]["inflight_limit"] == AIMD.max_inflight
            await burst(fleet, 40)
        assert stats(s)["peak_in_flight"] > 30


async def test_cache_salt_follows_the_policy_version_and_vllm_weight_update(tmp_path):
    with start_scripted_server(log_path=tmp_path / "s.log") as s:
        async with FleetClient([s.url], cfg(server_api="vllm")) as fleet:
            await fleet.generate([1], max_tokens=1)
            await fleet.update_weights(5, tmp_path / "step-5")
            c = await fleet.generate([1], max_tokens=1)
            assert c.policy_version == 5
        async with FleetClient([s.url], cfg(cache_salt=False)) as fleet:
            await fleet.generate([1], max_tokens=1)
        st = stats(s)
    assert st["policy_version"] == 5 and (st["paused"], st["resumed"]) == (1, 1)
    assert st["cache_salts"] == {"swefleet-policy-v0": 1, "swefleet-policy-v5": 1}
    assert st["completions"] == 3
