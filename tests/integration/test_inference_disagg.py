"""Disaggregated prefill/decode through the fleet client against real loopback servers: scripted
prefill and decode servers emulating vLLM 0.26's NixlConnector hand-off (the decode server pulls
the prefilled "blocks" from the prefill server named in `kv_transfer_params`), a killed decode
server, a hung prefill server."""

from __future__ import annotations

import sys
import time

import httpx
import pytest
from swefleet.inference.config import InferenceConfig
from swefleet.inference.fleet import FleetClient
from swefleet.inference.launch import start_server
from swefleet.inference.protocol import CancelReason, RequestCancelled
from swefleet.inference.testing import RawServer

pytestmark = pytest.mark.integration


def scripted(role: str, log_dir, name: str):
    argv = [sys.executable, "-m", "swefleet.inference.scripted_server", "--port", "0", "--role", role]
    return start_server(argv, log_path=log_dir / f"{name}.log", startup_timeout_s=60)


def stats(server) -> dict:
    return httpx.get(f"{server.url}/stats", trust_env=False).json()


def cfg(**overrides) -> InferenceConfig:
    base = {
        "request_timeout_s": 10.0,
        "connect_timeout_s": 0.5,
        "retry_budget": 2,
        "retry_backoff_s": 0.01,
        "server_cooldown_s": 30.0,
    }
    return InferenceConfig(**{**base, **overrides})


async def test_prefill_answer_is_handed_to_the_decode_server(tmp_path):
    with (
        scripted("prefill", tmp_path, "p") as p,
        scripted("decode", tmp_path, "d1") as d1,
        scripted("decode", tmp_path, "d2") as d2,
    ):
        async with FleetClient([d1.url, d2.url], cfg(prefill_servers=[p.url])) as fleet:
            first = await fleet.generate([5, 9, 7], max_tokens=4, episode_id="ep")
            again = await fleet.generate([5, 9, 7, 1], max_tokens=2, episode_id="ep")
            metrics = fleet.server_metrics()
        decoder = d1 if first.server == d1.url else d2
        st_p, st_d = stats(p), stats(decoder)
    assert first.completion_ids == [8, 9, 10, 11] and first.logprobs == [-0.5] * 4
    assert first.extra["prefill_server"] == p.url and first.extra["retries"] == 0
    assert 0 < first.extra["first_token_s"] <= first.latency_s
    assert again.server == first.server  # episode affinity inside the decode pool
    assert (st_p["prefills"], st_p["kv_held"]) == (2, 0)  # both prefills were pulled
    assert st_p["completions"] == 2 and st_d["kv_pulls"] == 2
    params = st_d["last_kv_transfer_params"]  # exactly what the prefill server answered
    assert params["do_remote_prefill"] is True and params["do_remote_decode"] is False
    assert params["remote_engine_id"] == f"scripted-{p.port}"
    assert params["remote_num_tokens"] == 4 and params["remote_request_id"].startswith("cmpl-")
    assert set(params) >= {"remote_block_ids", "remote_host", "remote_port", "tp_size"}
    # cache_salt of the policy version on both phases
    assert st_p["cache_salts"] == {"swefleet-policy-v0": 2}
    assert st_d["cache_salts"] == {"swefleet-policy-v0": 2}
    assert metrics[p.url]["role"] == "prefill" and metrics[d1.url]["role"] == "decode"
    assert metrics[p.url]["completed"] == 2 and metrics[p.url]["latency_p50_s"] > 0


async def test_killed_decode_server_restarts_at_prefill_and_fails_over(tmp_path):
    with (
        scripted("prefill", tmp_path, "p") as p,
        scripted("decode", tmp_path, "d1") as d1,
        scripted("decode", tmp_path, "d2") as d2,
    ):
        async with FleetClient([d1.url, d2.url], cfg(prefill_servers=[p.url])) as fleet:
            first = await fleet.generate([1, 2], max_tokens=3, episode_id="ep")
            victim, survivor = (d1, d2) if first.server == d1.url else (d2, d1)
            victim.kill()
            again = await fleet.generate([1, 2, 3], max_tokens=3, episode_id="ep")
            metrics = fleet.server_metrics()
            assert fleet.totals["retries"] == 1
        st_p = stats(p)
    assert again.server == survivor.url and again.extra["retries"] == 1
    assert again.completion_ids == [4, 5, 6]
    # turn 1 + turn 2 twice (the failed decode restarted at the prefill); the blocks of the
    # failed pair were never pulled
    assert (st_p["prefills"], st_p["kv_held"]) == (3, 1)
    assert metrics[victim.url]["failures"] == 1 and not metrics[victim.url]["live"]


@pytest.mark.parametrize("first_token_timeout_s", [0.5, None])
async def test_hung_prefill_server_hits_the_deadline(tmp_path, first_token_timeout_s):
    total = 5.0 if first_token_timeout_s else 0.8
    config = cfg(request_timeout_s=total, first_token_timeout_s=first_token_timeout_s)
    with scripted("decode", tmp_path, "d") as d:
        async with RawServer(status=None) as hung:
            async with FleetClient([d.url], config, prefill_urls=[hung.url]) as fleet:
                t0 = time.monotonic()
                with pytest.raises(RequestCancelled) as info:
                    await fleet.generate([1, 2, 3], max_tokens=8, episode_id="ep")
                elapsed = time.monotonic() - t0
                assert fleet.totals["drops/timeout"] == 1 and fleet.totals["retries"] == 0
                assert fleet.server_metrics()[hung.url]["drops"] == {"timeout": 1}
            assert (hung.requests, hung.connections) == (1, 1)  # never retried
        assert stats(d)["completions"] == 0
    assert info.value.reason == CancelReason.timeout
    limit = first_token_timeout_s or total
    assert limit - 0.1 < elapsed < limit + 1.0
    if first_token_timeout_s:
        assert "first token" in info.value.detail


async def test_prefill_server_without_kv_connector_is_a_server_error(tmp_path):
    with scripted("both", tmp_path, "u") as unified, scripted("decode", tmp_path, "d") as d:
        async with FleetClient([d.url], cfg(prefill_servers=[unified.url])) as fleet:
            with pytest.raises(RequestCancelled) as info:
                await fleet.generate([1], max_tokens=2)
            assert fleet.totals["retries"] == 0
    assert info.value.reason == CancelReason.server_error
    assert "kv_transfer_params" in info.value.detail


async def test_decode_server_refuses_a_request_without_prefill(tmp_path):
    with scripted("decode", tmp_path, "d") as d:
        async with FleetClient([d.url], cfg()) as fleet:  # no prefill pool configured
            with pytest.raises(RequestCancelled) as info:
                await fleet.generate([1], max_tokens=2)
    assert info.value.reason == CancelReason.server_error and "HTTP 400" in info.value.detail
