"""Prefix reuse in the dynamic KV cache (`kv_mode=dynamic`, the CPU default): logprobs equal with
and without it, LRU store bounded in bytes, invalidation on new weights, vLLM-named counters,
routed experts of MoE models parked with the K/V (CPU, float32, tiny Qwen3 / Qwen3-MoE)."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch
from swefleet.inference.engine.core import Engine, GenerationResult, SamplingParams
from swefleet.inference.engine.metrics import render
from swefleet.inference.engine.model import load_model
from swefleet.inference.engine.prefix import Parked, PrefixStore, reusable
from swefleet.inference.engine.weights import read_weights
from swefleet.inference.testing import (
    perturbed_checkpoint,
    reference_logprobs,
    started_engine,
    tiny_checkpoint,
)

pytestmark = pytest.mark.unit

GREEDY = {"temperature": 0.0, "ignore_eos": True}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.getbasetemp() / "inference-models")


def make_engine(model_dir, prefix_cache: bool = True, **kw) -> Engine:
    return started_engine(model_dir, "dynamic", prefix_cache, **kw)


@pytest.fixture()
def engines(model_dir):
    on, off = make_engine(model_dir, True), make_engine(model_dir, False)
    yield on, off
    on.shutdown()
    off.shutdown()


def run_all(
    engine: Engine, prompts: list[list[int]], max_tokens: int | list[int], **params
) -> list[GenerationResult]:
    """Submit all at once (one admit); `max_tokens` per prompt or one for all."""
    results: list = [None] * len(prompts)
    done = [threading.Event() for _ in prompts]
    if isinstance(max_tokens, int):
        max_tokens = [max_tokens] * len(prompts)
    for i, prompt in enumerate(prompts):

        def cb(r, i=i):
            results[i] = r
            done[i].set()

        engine.submit(prompt, SamplingParams(max_tokens[i], **params), cb)
    assert all(ev.wait(60) for ev in done), "engine did not answer"
    assert all(isinstance(r, GenerationResult) for r in results), results
    return results


def run(engine: Engine, prompt: list[int], max_tokens: int, **params) -> GenerationResult:
    return run_all(engine, [prompt], max_tokens, **params)[0]


def settle(engine: Engine) -> PrefixStore:
    """The engine's prefix store once idle (a result is delivered before its row parks)."""
    deadline = time.monotonic() + 30
    while engine.load() != (0, 0):
        assert time.monotonic() < deadline, "engine did not go idle"
        time.sleep(0.005)
    return engine._kv.prefix


def close(a: list[float], b: list[float], tol: float = 1e-5) -> bool:
    return len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b, strict=True)) < tol


def entry(tokens: list[int], nbytes: int = 10) -> Parked:
    return Parked(list(tokens), f"kv{tokens}", nbytes, np.arange(len(tokens)))


def test_store_longest_prefix_lru_bound_and_epochs():
    assert reusable([1, 2, 3], [1, 2, 3]) == 2 and reusable([1, 2, 3], [1, 2, 9, 4]) == 2
    store = PrefixStore(max_bytes=30)
    assert store.lookup([1, 2]) == (0, None)
    assert store.park(entry([1, 2, 3]), store.epoch)
    assert store.park(entry([1, 2, 4, 5]), store.epoch)
    assert store.lookup([1, 2, 4, 5, 6])[0] == 4  # longest shared prefix
    hit, e = store.lookup([1, 2, 7])  # tie (2 tokens): the most recently used
    assert (hit, e.tokens) == (2, [1, 2, 4, 5])
    assert not store.park(entry([1, 2]), store.epoch)  # covered by a parked entry
    assert store.park(entry([1, 2, 3, 8, 9]), store.epoch)  # covers (drops) [1, 2, 3]
    assert len(store) == 2 and store.bytes == 20
    assert store.park(entry([7, 7]), store.epoch)
    store.lookup([1, 2, 3, 8, 9, 1])  # used: [1, 2, 4, 5] is now the least recent
    assert store.park(entry([6, 6]), store.epoch) and store.evictions == 1
    hit, e = store.lookup([1, 2, 4, 5, 1])  # [1, 2, 4, 5] was evicted: a shorter hit only
    assert (hit, e.tokens) == (2, [1, 2, 3, 8, 9])
    assert store.bytes == 30 and len(store) == 3
    assert not store.park(entry([5], nbytes=31), store.epoch)  # bigger than the whole budget
    old = store.epoch
    store.invalidate()
    assert store.bytes == 0 and store.lookup([7, 7, 7]) == (0, None)
    assert not store.park(entry([7, 7]), old)  # prefilled under the old weights
    assert not PrefixStore(100, enabled=False).park(entry([1, 2]), 0)


def test_multi_turn_logprobs_equal_with_and_without_cache(engines):
    on, off = engines
    turn1 = list(range(10, 40))
    out = {}
    for name, eng in (("on", on), ("off", off)):
        r1 = run(eng, turn1, max_tokens=12, **GREEDY)
        turn2 = turn1 + r1.token_ids + [5, 6, 7]
        r2 = run(eng, turn2, max_tokens=12, **GREEDY)
        turn3 = turn2 + r2.token_ids[:5] + [8]  # shares only part of the second turn's output
        r3 = run(eng, turn3, max_tokens=12, **GREEDY)
        out[name] = (turn2, turn3, r1, r2, r3)
    turn2, turn3, r1, r2, r3 = out["on"]
    assert out["off"][:2] == (turn2, turn3)
    # turn 2 reuses turn 1's prompt and all but its last generated token (never fed)
    assert (r1.cached_tokens, r2.cached_tokens, r3.cached_tokens) == (0, 30 + 11, len(turn2) + 5)
    assert [r.cached_tokens for r in out["off"][2:]] == [0, 0, 0]
    for a, b in zip(out["on"][2:], out["off"][2:], strict=True):
        assert a.token_ids == b.token_ids and close(a.logprobs, b.logprobs)
    assert close(r3.logprobs, reference_logprobs(on.model, turn3, r3.token_ids), 1e-4)
    c = on.counters
    assert c.prefix_queries == 30 + len(turn2) + len(turn3)
    assert c.prefix_hits == 41 + len(turn2) + 5
    assert off.counters.prefix_queries == c.prefix_queries and off.counters.prefix_hits == 0
    settle(on)  # turn 2's entry covered turn 1's; turn 3 diverged from turn 2's output
    assert [e.tokens for e in on._kv.prefix._entries.values()] == [
        turn2 + r2.token_ids[:11],
        turn3 + r3.token_ids[:11],
    ]
    text = render(on, "m")
    assert f'vllm:prefix_cache_hits_total{{model_name="m"}} {c.prefix_hits}' in text
    assert f'vllm:prefix_cache_queries_total{{model_name="m"}} {c.prefix_queries}' in text


def test_batched_conversations_and_shared_group_prompt(engines):
    """Continuations of two conversations prefilled in one admit with new prompts, a long request
    keeping the left-padded batch wide; then a group of identical prompts all reuse one parked
    entry (a hit does not consume it)."""
    on, off = engines
    firsts = [list(range(20, 20 + n)) for n in (9, 25)]
    results = {}
    for name, eng in (("on", on), ("off", off)):
        r1 = run_all(eng, firsts, max_tokens=6, **GREEDY)
        seconds = [p + r.token_ids + [1, 2] for p, r in zip(firsts, r1, strict=True)]
        mixed = [[3, 4, 5], seconds[1], [9, 8, 7, 6], seconds[0]]
        second = run_all(eng, mixed, max_tokens=[40, 10, 10, 10], **GREEDY)
        group = run_all(eng, [seconds[1]] * 3, max_tokens=5, seed=1, ignore_eos=True)
        results[name] = (second, group)
    (on2, on_group), (off2, off_group) = results["on"], results["off"]
    assert [r.cached_tokens for r in on2] == [0, 25 + 5, 0, 9 + 5]
    assert [r.cached_tokens for r in on_group] == [25 + 6 + 2 - 1] * 3
    for a, b in zip(on2 + on_group, off2 + off_group, strict=True):
        assert a.token_ids == b.token_ids and close(a.logprobs, b.logprobs)


def test_parked_bytes_stay_within_the_budget(model_dir):
    from swefleet.inference.engine.static import bytes_per_token

    per_token = bytes_per_token(load_model(model_dir).model)
    eng = make_engine(model_dir, prefix_cache_bytes=200 * per_token)
    try:
        prompts = [[i] * 60 for i in range(1, 8)]  # 7 entries x 63 parked tokens
        for p in prompts:
            run(eng, p, max_tokens=4, **GREEDY)
        store = settle(eng)
        assert store.bytes == 3 * 63 * per_token and len(store) == 3  # 200 // 63
        assert store.evictions == 4
        assert run(eng, prompts[0], max_tokens=2, **GREEDY).cached_tokens == 0  # evicted
        assert run(eng, prompts[-1], max_tokens=2, **GREEDY).cached_tokens == 59  # kept
    finally:
        eng.shutdown()


def test_weight_update_invalidates_cached_prefixes(model_dir, tmp_path):
    eng = make_engine(model_dir)
    try:
        prompt = list(range(100, 140))
        run(eng, prompt, max_tokens=4, **GREEDY)
        assert run(eng, prompt, max_tokens=4, **GREEDY).cached_tokens == len(prompt) - 1
        staged = read_weights(eng.model, perturbed_checkpoint(model_dir, tmp_path / "v1"))
        # a request running across the update mixes two policies: it must not park
        long, got, done = [7] * 20, [], threading.Event()

        def on_token(token, logprob, top):  # engine thread: the update lands mid-request
            if len(got) == 3:
                eng.update_weights(staged, 1, False, lambda r: done.set())
            got.append(token)

        (result,) = [None]
        waiter = threading.Event()

        def on_done(r):
            nonlocal result
            result = r
            waiter.set()

        eng.submit(long, SamplingParams(max_tokens=20, **GREEDY), on_done, on_token)
        assert done.wait(30) and waiter.wait(60)
        assert (result.policy_version, result.policy_version_final) == (0, 1)
        assert len(settle(eng)) == 0
        after = run(eng, prompt, max_tokens=6, **GREEDY)
        assert after.cached_tokens == 0 and after.policy_version == 1
        assert close(after.logprobs, reference_logprobs(eng.model, prompt, after.token_ids), 1e-4)
        assert run(eng, long, max_tokens=2, **GREEDY).cached_tokens == 0
        assert run(eng, prompt, max_tokens=2, **GREEDY).cached_tokens == len(prompt) - 1
    finally:
        eng.shutdown()


def test_moe_routed_experts_come_back_with_a_hit(tmp_path):
    """A prefix hit on an MoE model: the cached tokens' routed experts are those parked with the
    K/V, and the whole array still equals one full forward's routing."""
    from swefleet.trainer.replay_check import make_moe_checkpoint

    moe = make_moe_checkpoint(tmp_path / "moe", "tiny", gain=1.0)
    eng = make_engine(moe)
    try:
        first = list(range(3, 20))
        r1 = run(eng, first, max_tokens=6, **GREEDY)
        second = first + r1.token_ids + [4, 5]
        r2 = run(eng, second, max_tokens=6, **GREEDY)
        assert r2.cached_tokens == len(first) + 5
        ids = r2.routed_experts
        assert ids.shape[0] == len(second) + 5
        assert np.array_equal(ids[: r2.cached_tokens], r1.routed_experts[: r2.cached_tokens])
        ids_all = torch.tensor([second + r2.token_ids])
        with torch.no_grad():
            out = eng.model(input_ids=ids_all, output_router_logits=True)
        k = ids.shape[2]
        ref = torch.stack([torch.topk(lg.float(), k, -1).indices for lg in out.router_logits], 1)
        assert np.array_equal(np.sort(ids, -1), np.sort(ref.numpy()[:-1], -1))
    finally:
        eng.shutdown()
