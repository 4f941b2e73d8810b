"""AIMD in-flight limits from KV-cache usage: the controller, the gauge parser, routing by room."""

from __future__ import annotations

import pytest
from swefleet.inference.concurrency import AIMDController, parse_kv_usage
from swefleet.inference.config import ConcurrencyConfig
from swefleet.inference.routing import Router, ServerState

pytestmark = pytest.mark.unit

VLLM_METRICS = """# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="policy"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="policy"} 0.75
vllm:num_requests_running{engine="0",model_name="policy"} 12.0
"""


def cfg(**kw) -> ConcurrencyConfig:
    base = {
        "enabled": True,
        "initial_inflight": 8,
        "min_inflight": 2,
        "max_inflight": 32,
        "increase": 2.0,
        "decrease_factor": 0.5,
        "cooldown_s": 10.0,
    }
    return ConcurrencyConfig(**{**base, **kw})


def test_parse_kv_usage_takes_the_fullest_engine_and_old_name():
    assert parse_kv_usage(VLLM_METRICS) == 0.75
    assert parse_kv_usage("vllm:gpu_cache_usage_perc 0.5\n") == 0.5
    assert parse_kv_usage("vllm:num_requests_running 3\n# vllm:kv_cache_usage_perc 0.9\n") is None
    assert parse_kv_usage("vllm:kv_cache_usage_perc_total 0.9\n") is None  # other metric


def test_additive_increase_only_when_binding_and_below_watermark():
    c = AIMDController(cfg())
    assert c.observe(0.1, in_flight=2, now=0) == 8  # limit not reached: no proof more helps
    assert c.observe(0.1, in_flight=8, now=1) == 10
    assert c.observe(0.7, in_flight=10, now=2) == 10  # between watermarks: hold
    for t in range(3, 30):
        c.observe(0.1, in_flight=int(c.limit), now=t)
    assert c.limit == 32 and c.cap == 32  # ceiling


def test_multiplicative_decrease_with_cooldown_and_floor():
    c = AIMDController(cfg(initial_inflight=16))
    assert c.observe(0.95, in_flight=16, now=0) == 8
    assert c.observe(0.95, in_flight=16, now=5) == 8  # gauge lags: no second cut yet
    assert c.observe(0.95, in_flight=8, now=10) == 4
    assert c.observe(0.95, in_flight=4, now=20) == 2
    assert c.observe(0.95, in_flight=2, now=30) == 2 and c.cuts == 4  # floor
    assert c.overloaded(now=31) == 2


def test_overload_cuts_and_missing_gauge_disables():
    c = AIMDController(cfg(initial_inflight=16))
    assert c.overloaded(now=0) == 8
    assert c.observe(None, in_flight=3, now=1) == 32 and not c.adaptive
    assert c.overloaded(now=100) == 32  # no gauge: 503s are left to the retry logic
    assert c.observe(0.1, in_flight=0, now=101) == 16 and c.adaptive  # gauge came back


def test_config_validation():
    with pytest.raises(ValueError):
        ConcurrencyConfig(initial_inflight=2000)
    with pytest.raises(ValueError):
        ConcurrencyConfig(grow_below=0.9, cut_above=0.8)


def test_router_prefers_servers_with_room_over_affinity():
    a, b = ServerState("http://a", version=0), ServerState("http://b", version=0)
    router = Router([a, b], max_imbalance=100)
    sticky = router.pick("ep", 0, set(), now=0)
    other = b if sticky is a else a
    sticky.in_flight, sticky.limit = 3, 3  # full
    other.in_flight = 50  # loaded but under its (default, huge) limit
    assert router.pick("ep", 0, set(), now=0) is other
    assert router.pick("ep2", 0, set(), now=0) is other  # room beats load for new episodes too
    other.limit = 50  # every server full: plain least-loaded (the client waits before routing)
    assert router.pick("ep3", 0, set(), now=0) is sticky
