"""inference.config, inference.routing and the engine's sampling helpers (no servers)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError
from swefleet.inference.config import InferenceConfig
from swefleet.inference.routing import Router, ServerState

pytestmark = pytest.mark.unit


def test_config_forbids_unknown_fields_and_checks_values():
    cfg = InferenceConfig(servers=["http://127.0.0.1:8000/"])
    assert cfg.servers == ["http://127.0.0.1:8000"]
    with pytest.raises(ValidationError):
        InferenceConfig(request_timout_s=3)  # typo
    with pytest.raises(ValidationError):
        InferenceConfig(servers=["127.0.0.1:8000"])
    with pytest.raises(ValidationError):
        InferenceConfig(top_p=0)
    with pytest.raises(ValidationError):
        InferenceConfig(connect_timeout_s=10, request_timeout_s=1)


def test_stream_with_router_replay_is_a_config_error():
    vllm = {"kind": "vllm", "gpus": [0], "vllm": {"return_routed_experts": True}}
    with pytest.raises(ValidationError, match="routed_experts"):
        InferenceConfig(**vllm, stream=True)
    assert InferenceConfig(**vllm).vllm.return_routed_experts  # unstreamed: replay works


def test_a_forked_engine_core_may_come_from_a_standby():
    vllm = {"kind": "vllm", "gpus": [0], "vllm": {"engine_start_method": "fork"}}
    cfg = InferenceConfig(**vllm, standby_servers=True)
    assert cfg.standby_servers and cfg.vllm.engine_start_method == "fork"


def test_every_config_field_has_a_docstring():
    import ast
    import inspect

    import swefleet.inference.config as mod

    tree = ast.parse(inspect.getsource(mod))
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "InferenceConfig")
    documented = {
        prev.target.id
        for prev, nxt in zip(cls.body, cls.body[1:], strict=False)
        if isinstance(prev, ast.AnnAssign) and isinstance(nxt, ast.Expr)
    }
    assert documented == set(InferenceConfig.model_fields)


def test_light_modules_do_not_import_torch():
    code = (
        "import sys, inference, inference.fleet, inference.launch, inference.config\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'heavy import'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def _servers(*loads: int) -> list[ServerState]:
    return [ServerState(f"http://s{i}", version=0, in_flight=n) for i, n in enumerate(loads)]


def test_router_picks_least_outstanding():
    servers = _servers(3, 1, 2)
    assert Router(servers, max_imbalance=0).pick("", 0, set(), now=0.0) is servers[1]


def test_router_keeps_episode_affinity_within_imbalance():
    servers = _servers(0, 0)
    router = Router(servers, max_imbalance=2)
    first = router.pick("ep", 0, set(), now=0.0)
    first.in_flight = 2  # still within 2 of the idle one
    assert router.pick("ep", 0, set(), now=0.0) is first
    first.in_flight = 3  # too busy: move, and stick to the new one
    moved = router.pick("ep", 0, set(), now=0.0)
    assert moved is not first
    first.in_flight = 0
    assert router.pick("ep", 0, set(), now=0.0) is moved


def test_router_skips_down_and_tried_servers_and_old_versions():
    servers = _servers(0, 5, 9)
    router = Router(servers, max_imbalance=0)
    servers[0].down_until = 10.0
    assert router.pick("", 0, set(), now=1.0) is servers[1]
    assert router.pick("", 0, {"http://s1"}, now=1.0) is servers[2]
    assert router.pick("", 0, {"http://s1", "http://s2"}, now=1.0) is servers[1]  # all tried
    assert router.pick("", 0, set(), now=11.0) is servers[0]  # cooldown over
    servers[2].version = 3
    assert router.pick("", 3, set(), now=1.0) is servers[2]
    assert router.pick("", 4, set(), now=1.0) is None


def test_router_probes_soonest_back_when_all_down():
    servers = _servers(0, 0)
    servers[0].down_until, servers[1].down_until = 9.0, 5.0
    assert Router(servers, 0).pick("", 0, set(), now=1.0) is servers[1]


def test_sampling_top_p_greedy_and_seeds():
    import torch
    from swefleet.inference.engine.sampling import RowParams, make_generator, sample, top_p_filter

    cpu = torch.device("cpu")
    probs = torch.tensor([[0.5, 0.3, 0.15, 0.05], [0.05, 0.15, 0.3, 0.5]])
    kept = top_p_filter(probs, torch.tensor([0.7, 1.0]))
    assert torch.allclose(kept, torch.tensor([[0.5, 0.3, 0.0, 0.0], [0.05, 0.15, 0.3, 0.5]]))
    logits = torch.log(probs)

    def rows(n: int, seed: int, temperature: float = 1.0, top_p: float = 1.0) -> list[RowParams]:
        return [RowParams(temperature, top_p, make_generator(seed + i, cpu)) for i in range(n)]

    assert sample(logits, rows(2, 0, temperature=0.0)).tokens == [0, 3]
    many = logits.repeat(1000, 1)  # rows alternate between the two distributions
    draws = sample(many, rows(2000, 0, top_p=0.7)).tokens
    assert set(draws[0::2]) == {0, 1}
    assert set(draws[1::2]) == {2, 3}  # 0.5 + 0.3 reaches 0.7
    firsts = sample(many, rows(2000, 10_000)).tokens[0::2]
    freq = [firsts.count(t) / len(firsts) for t in range(4)]
    assert max(abs(f - p) for f, p in zip(freq, probs[0].tolist(), strict=True)) < 0.05
    out = sample(logits, rows(2, 5))
    expected = [torch.log_softmax(logits[i], -1)[t].item() for i, t in enumerate(out.tokens)]
    assert out.logprobs == pytest.approx(expected, abs=1e-6)
    assert sample(logits, rows(2, 5)).tokens == out.tokens  # same seeds, same draws
