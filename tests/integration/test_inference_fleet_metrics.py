"""KV-cache hit rate of the fleet metrics against a loopback scripted server that emulates a
prefix cache and exposes vLLM 0.26's `vllm:prefix_cache_{queries,hits}_total` counters."""

from __future__ import annotations

import asyncio
import sys

import pytest
from swefleet.inference.config import ConcurrencyConfig, InferenceConfig
from swefleet.inference.fleet import FleetClient
from swefleet.inference.launch import start_server

pytestmark = pytest.mark.integration


def scripted(tmp_path, name: str, *flags: str):
    argv = [sys.executable, "-m", "swefleet.inference.scripted_server", "--port", "0", *flags]
    return start_server(argv, log_path=tmp_path / f"{name}.log", startup_timeout_s=60)


async def test_kv_hit_rate_per_server_and_fleet(tmp_path):
    prompt = list(range(1, 33))  # two 16-token blocks
    with scripted(tmp_path, "c", "--prefix-cache") as cached, scripted(tmp_path, "n") as plain:
        async with FleetClient([cached.url], InferenceConfig()) as fleet:
            await fleet.generate(prompt, max_tokens=2, episode_id="ep")
            await fleet.scrape_metrics()
            first = fleet.server_metrics()[cached.url]
            await fleet.generate(prompt + list(range(40, 56)), max_tokens=2, episode_id="ep")
            await fleet.scrape_metrics()
            second = fleet.server_metrics()[cached.url]
            flat = fleet.metrics()  # everything since the start: both turns
            await fleet.generate(prompt + list(range(40, 72)), max_tokens=2, episode_id="ep")
            await fleet.scrape_metrics()
            step = fleet.metrics()  # only what came after the previous call: turn 3
        async with FleetClient([plain.url], InferenceConfig()) as fleet:
            await fleet.generate(prompt, max_tokens=2)
            await fleet.scrape_metrics()
            absent = fleet.server_metrics()[plain.url]
            assert "infer/kv_hit_rate" not in fleet.metrics()
    assert first["kv_hit_rate"] == 0.0  # 32 tokens queried, nothing cached yet
    assert second["kv_hit_rate"] == pytest.approx(32 / 48)  # turn 2 reuses turn 1's blocks
    assert second["kv_hit_rate_cumulative"] == pytest.approx(32 / 80)
    assert flat["infer/kv_hit_rate"] == pytest.approx(32 / 80)
    assert step["infer/kv_hit_rate"] == pytest.approx(48 / 64)  # 3 of its 4 blocks were cached
    assert step["infer/prompt_tokens"] == 64
    assert absent["kv_hit_rate"] is None and absent["kv_hit_rate_cumulative"] is None


async def test_scrape_metrics_polls_in_the_background(tmp_path):
    poll = ConcurrencyConfig(poll_interval_s=0.05)
    config = InferenceConfig(scrape_metrics=True, concurrency=poll)
    with scripted(tmp_path, "c", "--prefix-cache", "--kv-capacity", "8") as cached:
        async with FleetClient([cached.url], config) as fleet:
            await fleet.generate(list(range(1, 33)), max_tokens=2)
            await asyncio.sleep(0.4)
            metrics = fleet.server_metrics()[cached.url]
            polls = fleet.totals["metrics_polls"]
    assert polls >= 3
    assert metrics["kv_usage"] == 0.0 and metrics["kv_hit_rate_cumulative"] == 0.0
    assert metrics["inflight_limit"] == 1 << 30  # scraping alone sets no limit


async def test_idle_fraction_is_the_share_of_time_without_requests(tmp_path):
    """A server answering in 0.4 s: busy windows read ~0, an idle window ~1, a half-busy one
    in between (real loopback server, real wall time)."""
    with scripted(tmp_path, "slow", "--delay-s", "0.4") as server:
        async with FleetClient([server.url], InferenceConfig()) as fleet:
            fleet.metrics()  # start a window
            await asyncio.gather(*(fleet.generate([1, 2, 3], max_tokens=2) for _ in range(4)))
            busy = fleet.metrics()["infer/idle_fraction"]
            await asyncio.sleep(0.4)
            idle = fleet.metrics()["infer/idle_fraction"]
            await fleet.generate([1, 2, 3], max_tokens=2)
            await asyncio.sleep(0.4)
            half = fleet.metrics()["infer/idle_fraction"]
    assert busy < 0.25
    assert idle == pytest.approx(1.0)
    assert 0.25 < half < 0.75
