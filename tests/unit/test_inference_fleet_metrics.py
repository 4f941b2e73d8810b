"""Prefix-cache hit rate from vLLM 0.26's Prometheus counters: parsing, windows, restarts."""

from __future__ import annotations

import math

import pytest
from swefleet.inference.concurrency import kv_usage_of, parse_samples, prefix_cache_of
from swefleet.inference.routing import PrefixCacheStats, ServerState

pytestmark = pytest.mark.unit

# prometheus_client's exposition of vLLM 0.26's counters (`_total` suffix, `_created` samples),
# two data-parallel engines
VLLM_METRICS = """# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="policy"} 1000.0
vllm:prefix_cache_queries_total{engine="1",model_name="policy"} 600.0
vllm:prefix_cache_queries_created{engine="0",model_name="policy"} 1.7e9
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="policy"} 700.0
vllm:prefix_cache_hits_total{engine="1",model_name="policy"} 100.0
vllm:external_prefix_cache_hits_total{engine="0",model_name="policy"} 5.0
vllm:kv_cache_usage_perc{engine="0",model_name="policy"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="policy"} NaN
"""


def test_counters_are_summed_over_engines():
    samples = parse_samples(VLLM_METRICS)
    assert prefix_cache_of(samples) == (1600.0, 800.0)
    assert kv_usage_of(samples) == 0.25  # NaN samples are dropped


def test_bare_counter_names_are_accepted_and_absent_ones_give_none():
    assert prefix_cache_of(
        parse_samples("vllm:prefix_cache_queries 10\nvllm:prefix_cache_hits 4\n")
    ) == (10.0, 4.0)
    assert prefix_cache_of(parse_samples("vllm:prefix_cache_queries_total 10\n")) is None
    assert prefix_cache_of(parse_samples("swefleet:policy_version 3\n")) is None


def test_window_and_cumulative_rates_and_a_restart():
    stats = PrefixCacheStats()
    stats.update(100.0, 20.0)  # first scrape: the window is everything since the server started
    assert (stats.window_rate, stats.cumulative_rate) == (0.2, 0.2)
    stats.update(300.0, 170.0)
    assert stats.window_rate == pytest.approx(150 / 200) and stats.cumulative_rate == pytest.approx(
        170 / 300
    )
    stats.update(300.0, 170.0)  # nothing queried since
    assert stats.window_rate is None
    stats.update(50.0, 40.0)  # counters went back: restarted server, count from its zero
    assert stats.window_rate == pytest.approx(0.8) and stats.cumulative_rate == pytest.approx(0.8)


def test_snapshot_reports_none_where_not_exposed():
    server = ServerState("http://127.0.0.1:1")
    snap = server.snapshot(0.0)
    assert snap["kv_hit_rate"] is None and snap["kv_usage"] is None
    server.prefix = PrefixCacheStats()
    server.prefix.update(10.0, 5.0)
    assert server.snapshot(0.0)["kv_hit_rate"] == 0.5
    assert not math.isnan(server.snapshot(0.0)["kv_hit_rate_cumulative"])
