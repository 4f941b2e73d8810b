"""The embedded engine on CUDA, both KV backends (dynamic; static + CUDA graphs): exact logprobs
in float32, close ones in bfloat16, batching."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from swefleet.inference.engine.core import Engine, GenerationResult, SamplingParams
from swefleet.inference.engine.model import load_model
from swefleet.inference.testing import reference_logprobs, tiny_checkpoint

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]

PROMPTS = [list(range(10, 10 + n)) for n in (3, 17, 8, 30, 1, 12, 64, 5)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.getbasetemp() / "inference-models")


KV_MODES = ["dynamic", "static"]


def make_engine(model_dir, dtype: str, kv_mode: str = "dynamic") -> Engine:
    loaded = load_model(model_dir, device="cuda", dtype=dtype)
    eng = Engine(
        loaded.model, loaded.eos_ids, max_model_len=4096, max_batch_size=16, kv_mode=kv_mode
    )
    eng.start()
    return eng


def run_all(engine: Engine, prompts: list[list[int]], **params) -> list[GenerationResult]:
    results: list = [None] * len(prompts)
    done = [threading.Event() for _ in prompts]
    for i, prompt in enumerate(prompts):

        def cb(r, i=i):
            results[i] = r
            done[i].set()

        engine.submit(prompt, SamplingParams(**params), cb)
    for ev in done:
        assert ev.wait(120)
    assert all(isinstance(r, GenerationResult) for r in results), results
    return results


@pytest.mark.parametrize("kv_mode", KV_MODES)
def test_float32_logprobs_match_reference_and_batching(model_dir, kv_mode):
    eng = make_engine(model_dir, "float32", kv_mode)
    try:
        alone = [
            run_all(eng, [p], max_tokens=20, temperature=0.0, ignore_eos=True)[0] for p in PROMPTS
        ]
        together = run_all(eng, PROMPTS, max_tokens=20, temperature=0.0, ignore_eos=True)
        for prompt, a, b in zip(PROMPTS, alone, together, strict=True):
            assert a.token_ids == b.token_ids
            ref = reference_logprobs(eng.model, prompt, a.token_ids)
            assert max(abs(x - y) for x, y in zip(a.logprobs, ref, strict=True)) < 1e-3
            assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs, strict=True)) < 1e-3
    finally:
        eng.shutdown()


@pytest.mark.parametrize("kv_mode", KV_MODES)
def test_bfloat16_logprobs_close_to_reference(model_dir, kv_mode):
    eng = make_engine(model_dir, "auto", kv_mode)  # bfloat16 on CUDA
    try:
        assert next(eng.model.parameters()).dtype == torch.bfloat16
        results = run_all(eng, PROMPTS, max_tokens=20, seed=0, ignore_eos=True)
        worst = 0.0
        for prompt, r in zip(PROMPTS, results, strict=True):
            ref = reference_logprobs(eng.model, prompt, r.token_ids)
            worst = max(worst, *(abs(x - y) for x, y in zip(r.logprobs, ref, strict=True)))
        print(f"{kv_mode}: bf16 batched vs full-forward max |dlogprob| = {worst:.4f}")
        assert worst < 0.1
    finally:
        eng.shutdown()


@pytest.mark.parametrize("kv_mode", KV_MODES)
def test_decode_throughput_report(model_dir, kv_mode):
    eng = make_engine(model_dir, "auto", kv_mode)
    try:
        run_all(eng, PROMPTS[:2], max_tokens=8, ignore_eos=True)  # warm up
        prompts = [list(range(10, 200)) for _ in range(16)]
        t0 = time.perf_counter()
        results = run_all(eng, prompts, max_tokens=128, ignore_eos=True)
        dt = time.perf_counter() - t0
        tokens = sum(len(r.token_ids) for r in results)
        steps, rows = eng.counters.decode_steps, eng.counters.decode_rows
        print(f"{kv_mode}: 16x128 tokens: {tokens / dt:.0f} tok/s, mean batch {rows / steps:.1f}")
        assert tokens == 16 * 128
    finally:
        eng.shutdown()


def test_static_graphs_equal_static_eager_while_sequences_join_and_leave(model_dir):
    """CUDA-graph replay computes what the eager static forward computes, with rows of
    different lengths joining and leaving (float32: same greedy tokens, logprobs within 1e-4)."""
    loaded = load_model(model_dir, device="cuda", dtype="float32")
    prompts = [list(range(5, 5 + n)) for n in (3, 300, 40, 7, 129, 64, 2, 90, 11, 257)]
    out = {}
    for graphs in (False, True):
        eng = Engine(
            loaded.model,
            loaded.eos_ids,
            max_model_len=1024,
            max_batch_size=4,
            kv_mode="static",
            cuda_graphs=graphs,
        )
        eng.start()
        try:
            out[graphs] = [
                (r.token_ids, r.logprobs)
                for r in run_all(eng, prompts, max_tokens=300, temperature=0.0, ignore_eos=True)
            ]
            if graphs:
                assert eng._kv.decoder.captures > 1
        finally:
            eng.shutdown()
    for (ids_e, lp_e), (ids_g, lp_g) in zip(out[False], out[True], strict=True):
        assert ids_e == ids_g
        assert max(abs(a - b) for a, b in zip(lp_e, lp_g, strict=True)) < 1e-4


def test_static_graphs_sample_like_eager_and_reuse_prefixes(model_dir):
    """Seeded temperature-1 sampling inside the decode graph draws what the eager static path
    draws; a second turn reusing the first turn's K/V (prefix cache) keeps float32 logprobs of a
    full forward."""
    loaded = load_model(model_dir, device="cuda", dtype="float32")
    prompts = [list(range(5, 5 + n)) for n in (3, 300, 40, 129)]  # one slot each
    out = {}
    for graphs in (False, True):
        eng = Engine(
            loaded.model,
            loaded.eos_ids,
            max_model_len=1024,
            max_batch_size=4,
            kv_mode="static",
            cuda_graphs=graphs,
        )
        eng.start()
        try:
            first = run_all(eng, prompts, max_tokens=40, seed=3, ignore_eos=True)
            seconds = [p + r.token_ids + [1, 2] for p, r in zip(prompts, first, strict=True)]
            second = run_all(eng, seconds, max_tokens=20, seed=4, ignore_eos=True)
            out[graphs] = [r.token_ids for r in first + second]
            assert [r.cached_tokens for r in second] == [len(p) + 39 for p in prompts]
            assert eng.counters.prefix_hits == sum(len(p) + 39 for p in prompts)
            for prompt, r in zip(seconds, second, strict=True):
                ref = reference_logprobs(eng.model, prompt, r.token_ids)
                assert max(abs(x - y) for x, y in zip(r.logprobs, ref, strict=True)) < 1e-3
        finally:
            eng.shutdown()
    assert out[True] == out[False]
