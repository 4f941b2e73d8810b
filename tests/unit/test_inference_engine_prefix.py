"""Prefix reuse in the static KV cache: exact logprobs with and without it, slot choice,
invalidation on new weights, vLLM-named counters (CPU, float32, tiny Qwen3)."""

from __future__ import annotations

import threading

import pytest
from swefleet.inference.engine.core import Engine, GenerationResult, SamplingParams
from swefleet.inference.engine.metrics import render
from swefleet.inference.engine.prefix import PrefixSlots, common_prefix
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


def make_engine(model_dir, prefix_cache: bool, slots: int = 4) -> Engine:
    return started_engine(model_dir, "static", prefix_cache, max_batch_size=slots)


@pytest.fixture()
def engines(model_dir):
    on, off = make_engine(model_dir, True), make_engine(model_dir, False)
    yield on, off
    on.shutdown()
    off.shutdown()


def run_all(engine: Engine, prompts: list[list[int]], **params) -> list[GenerationResult]:
    results: list = [None] * len(prompts)
    done = [threading.Event() for _ in prompts]
    for i, prompt in enumerate(prompts):

        def cb(r, i=i):
            results[i] = r
            done[i].set()

        engine.submit(prompt, SamplingParams(**params), cb)
    assert all(ev.wait(60) for ev in done), "engine did not answer"
    assert all(isinstance(r, GenerationResult) for r in results), results
    return results


def run(engine: Engine, prompt: list[int], **params) -> GenerationResult:
    return run_all(engine, [prompt], **params)[0]


def close(a: list[float], b: list[float], tol: float = 1e-4) -> bool:
    return len(a) == len(b) and max(abs(x - y) for x, y in zip(a, b, strict=True)) < tol


def test_common_prefix():
    assert common_prefix([1, 2, 3], [1, 2, 3, 4]) == 3
    assert common_prefix([1, 2, 3, 9, 5], [1, 2, 3, 4, 5]) == 3
    assert common_prefix([7], [1]) == common_prefix([], [1]) == 0
    assert common_prefix(list(range(1000)), [*range(777), -1]) == 777


def test_slot_choice_longest_prefix_then_lru_and_invalidation():
    slots = PrefixSlots(3, capacity=8)
    a, hit = slots.take([1, 2, 3])
    b, _ = slots.take([5, 6])
    assert (a, b, hit) == (0, 1, 0)  # empty slots: lowest index first
    slots.append([a, b], [4, 7])
    slots.release(b)
    slots.release(a)
    assert slots.park(a) == 4 and slots.park(b) == 3  # past the remembered tokens
    assert slots.take([1, 2, 3, 4, 9]) == (a, 4)  # longest shared prefix wins over empty slot 2
    assert slots.take([1, 2, 3]) == (2, 0)  # no hit: the empty slot
    slots.release(a)
    assert slots.take([1, 2, 3, 4, 9]) == (a, 4)  # whole prompt cached but its last token
    for _ in range(3):  # fills past capacity - 1: trimmed on release
        slots.append([a], [1])
    slots.release(a)
    assert len(slots.tokens[a]) == 7 and slots.park(a) == 7
    slots.invalidate()
    assert slots.take([1, 2, 3, 4, 9]) == (a, 0)  # everything forgotten: lowest empty slot
    slots.release(2)  # taken before the update
    assert slots.tokens[2] == []  # its K/V mixes two weight versions


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
    assert out["off"][0] == turn2 and out["off"][1] == turn3  # same first turns
    # turn 2 reuses turn 1's prompt and all but its last generated token (never fed)
    assert (r1.cached_tokens, r2.cached_tokens, r3.cached_tokens) == (0, 30 + 11, len(turn2) + 5)
    assert [r.cached_tokens for r in out["off"][2:]] == [0, 0, 0]
    for a, b in zip(out["on"][2:], out["off"][2:], strict=True):
        assert a.token_ids == b.token_ids
        assert close(a.logprobs, b.logprobs)
    assert close(r3.logprobs, reference_logprobs(on.model, turn3, r3.token_ids))
    c = on.counters
    assert c.prefix_queries == 30 + len(turn2) + len(turn3)
    assert c.prefix_hits == 41 + len(turn2) + 5
    text = render(on, "m")
    assert f'vllm:prefix_cache_hits_total{{model_name="m"}} {c.prefix_hits}' in text
    assert f'vllm:prefix_cache_queries_total{{model_name="m"}} {c.prefix_queries}' in text


def test_cached_slots_survive_batches_around_them(engines):
    """Continuations of several cached conversations prefilled together with new prompts (mixed
    offsets in one batched prefill) while padding rows of decode buckets park in free slots."""
    on, off = engines
    firsts = [list(range(20, 20 + n)) for n in (9, 25)]
    results = {}
    for name, eng in (("on", on), ("off", off)):
        r1 = run_all(eng, firsts, max_tokens=6, **GREEDY)
        # a long request in the lowest free slot: every decode step covers the cached slots
        other = run(eng, [3, 4, 5], max_tokens=40, **GREEDY)
        seconds = [p + r.token_ids + [1, 2] for p, r in zip(firsts, r1, strict=True)]
        mixed = [seconds[1], [9, 8, 7, 6], seconds[0]]
        results[name] = (run_all(eng, mixed, max_tokens=10, **GREEDY), other)
    (on2, on_other), (off2, off_other) = results["on"], results["off"]
    assert [r.cached_tokens for r in on2] == [25 + 5, 0, 9 + 5]
    assert on_other.token_ids == off_other.token_ids
    for a, b in zip(on2, off2, strict=True):
        assert a.token_ids == b.token_ids and close(a.logprobs, b.logprobs)


def test_seeded_sampling_same_with_cache(engines):
    prompt = list(range(50, 90))
    first = [run(eng, prompt, max_tokens=8, seed=7, ignore_eos=True) for eng in engines]
    again = [run(eng, prompt, max_tokens=8, seed=7, ignore_eos=True) for eng in engines]
    assert again[0].cached_tokens == len(prompt) - 1 and again[1].cached_tokens == 0
    assert first[0].token_ids == again[0].token_ids == again[1].token_ids
    assert close(again[0].logprobs, again[1].logprobs)


def test_weight_update_invalidates_cached_prefixes(model_dir, tmp_path):
    eng = make_engine(model_dir, True)
    try:
        prompt = list(range(100, 140))
        run(eng, prompt, max_tokens=4, **GREEDY)
        assert run(eng, prompt, max_tokens=4, **GREEDY).cached_tokens == len(prompt) - 1
        staged = read_weights(eng.model, perturbed_checkpoint(model_dir, tmp_path / "v1"))
        done = threading.Event()
        eng.update_weights(staged, 1, False, lambda r: done.set())
        assert done.wait(30)
        after = run(eng, prompt, max_tokens=6, **GREEDY)
        assert after.cached_tokens == 0 and after.policy_version == 1
        assert close(after.logprobs, reference_logprobs(eng.model, prompt, after.token_ids))
    finally:
        eng.shutdown()
