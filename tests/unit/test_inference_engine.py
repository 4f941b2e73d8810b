"""The embedded engine in-process on the tiny Qwen3: exact logprobs, batching, weight updates."""

from __future__ import annotations

import threading
import time

import pytest
import torch
from swefleet.inference.engine.core import Engine, GenerationResult, SamplingParams
from swefleet.inference.engine.model import load_model
from swefleet.inference.engine.weights import read_weights
from swefleet.inference.testing import perturbed_checkpoint, reference_logprobs, tiny_checkpoint

pytestmark = pytest.mark.unit

PROMPTS = [list(range(10, 10 + n)) for n in (3, 17, 8, 30, 1, 12)]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.getbasetemp() / "inference-models")


@pytest.fixture(params=["dynamic", "static"])
def engine(model_dir, request):
    """Both KV backends: transformers' forward + dynamic cache, and our static-slot forward
    (eager on CPU; the same code is replayed as CUDA graphs on GPUs, tests/gpu)."""
    torch.set_num_threads(1)
    loaded = load_model(model_dir)
    eng = Engine(
        loaded.model, loaded.eos_ids, max_model_len=4096, max_batch_size=8, kv_mode=request.param
    )
    eng.start()
    yield eng
    eng.shutdown()


class Waiter:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: GenerationResult | None = None

    def __call__(self, result) -> None:
        self.result = result
        self.done.set()

    def get(self) -> GenerationResult:
        assert self.done.wait(60), "engine did not answer"
        assert isinstance(self.result, GenerationResult), self.result
        return self.result


def submit(engine: Engine, prompt: list[int], **params) -> Waiter:
    waiter = Waiter()
    engine.submit(prompt, SamplingParams(**params), waiter)
    return waiter


def run(engine: Engine, prompt: list[int], **params) -> GenerationResult:
    return submit(engine, prompt, **params).get()


@pytest.mark.parametrize("temperature", [1.0, 0.0, 0.7])
def test_logprobs_match_reference_forward(engine, temperature):
    """Raw (temperature-1) logprobs of exactly the returned ids, whatever the sampling T."""
    for prompt in PROMPTS[:3]:
        r = run(engine, prompt, max_tokens=12, temperature=temperature, seed=3, ignore_eos=True)
        assert len(r.token_ids) == len(r.logprobs) == 12 and r.finish_reason == "length"
        ref = reference_logprobs(engine.model, prompt, r.token_ids)
        assert max(abs(a - b) for a, b in zip(r.logprobs, ref, strict=True)) < 1e-4


def test_batched_greedy_equals_single(engine):
    alone = [run(engine, p, max_tokens=10, temperature=0.0, ignore_eos=True) for p in PROMPTS]
    steps, rows = engine.counters.decode_steps, engine.counters.decode_rows
    waiters = [
        submit(engine, p, max_tokens=10 + 25 * i, temperature=0.0, ignore_eos=True)
        for i, p in enumerate(PROMPTS[:3])
    ]
    waiters[0].get()  # later requests join a batch already decoding
    waiters += [
        submit(engine, p, max_tokens=10, temperature=0.0, ignore_eos=True) for p in PROMPTS[3:]
    ]
    together = [w.get() for w in waiters]
    for single, batched in zip(alone, together, strict=True):
        assert batched.token_ids[:10] == single.token_ids
        assert max(abs(a - b) for a, b in zip(single.logprobs, batched.logprobs)) < 1e-4
    mean_batch = (engine.counters.decode_rows - rows) / (engine.counters.decode_steps - steps)
    assert mean_batch > 1.5


def test_seeded_sampling_is_reproducible_alone_or_batched(engine):
    alone = run(engine, PROMPTS[1], max_tokens=15, seed=42, ignore_eos=True)
    others = [
        submit(engine, p, max_tokens=15, seed=i, ignore_eos=True) for i, p in enumerate(PROMPTS)
    ]
    again = submit(engine, PROMPTS[1], max_tokens=15, seed=42, ignore_eos=True).get()
    [w.get() for w in others]
    assert again.token_ids == alone.token_ids
    unseeded = {
        tuple(run(engine, PROMPTS[1], max_tokens=15, ignore_eos=True).token_ids) for _ in range(3)
    }
    assert len(unseeded) > 1


def test_stop_token_and_eos_end_with_stop(engine):
    greedy = run(engine, PROMPTS[0], max_tokens=8, temperature=0.0, ignore_eos=True).token_ids
    stopped = run(
        engine, PROMPTS[0], max_tokens=8, temperature=0.0, stop_ids=frozenset({greedy[3]})
    )
    first = greedy.index(greedy[3])
    assert stopped.token_ids == greedy[: first + 1]  # the stop id is included, as vLLM
    assert (stopped.finish_reason, stopped.stop_reason) == ("stop", greedy[3])
    engine.eos_ids = frozenset({greedy[2]})
    eos = run(engine, PROMPTS[0], max_tokens=8, temperature=0.0)
    assert eos.finish_reason == "stop" and eos.stop_reason is None
    assert eos.token_ids == greedy[: greedy.index(greedy[2]) + 1]


def test_invalid_requests_are_refused(engine):
    with pytest.raises(ValueError, match="empty"):
        engine.submit([], SamplingParams(max_tokens=3), lambda r: None)
    with pytest.raises(ValueError, match="max_model_len"):
        engine.submit([1] * 4090, SamplingParams(max_tokens=10), lambda r: None)
    with pytest.raises(ValueError, match="vocabulary"):
        engine.submit([10**6], SamplingParams(max_tokens=3), lambda r: None)


def test_update_weights_changes_outputs_and_version(engine, model_dir, tmp_path):
    before = run(engine, PROMPTS[3], max_tokens=10, temperature=0.0, ignore_eos=True)
    staged = read_weights(engine.model, perturbed_checkpoint(model_dir, tmp_path / "v1"))
    done = Waiter()
    engine.update_weights(staged, 1, False, done)
    assert done.done.wait(30) and done.result.policy_version == 1
    # since the start: one request admitted in one round, its 9 tokens after the first decoded
    r = done.result
    assert (r.prefill_rounds, r.decode_steps, r.decode_rows) == (1, 9, 9)
    n = len(PROMPTS[3])  # each decode step's longest row: the prompt and the tokens so far
    assert r.longest_row_sum == sum(n + i for i in range(1, 10))
    after = run(engine, PROMPTS[3], max_tokens=10, temperature=0.0, ignore_eos=True)
    assert after.token_ids != before.token_ids
    assert (after.policy_version, after.policy_version_final) == (1, 1)
    ref = reference_logprobs(engine.model, PROMPTS[3], after.token_ids)
    assert max(abs(a - b) for a, b in zip(after.logprobs, ref, strict=True)) < 1e-4


def test_mismatched_checkpoint_is_refused_before_copying(engine, model_dir, tmp_path):
    from safetensors.torch import load_file, save_file

    bad = perturbed_checkpoint(model_dir, tmp_path / "bad")
    tensors = load_file(str(bad / "model.safetensors"))
    tensors["lm_head.weight"] = tensors["lm_head.weight"][:-1]
    save_file(tensors, str(bad / "model.safetensors"))
    snapshot = engine.model.model.embed_tokens.weight.clone()
    with pytest.raises(ValueError, match="shape"):
        read_weights(engine.model, bad)
    assert torch.equal(snapshot, engine.model.model.embed_tokens.weight)


def test_cancel_and_abort_on_weight_update(engine, model_dir, tmp_path):
    long = {"max_tokens": 3000, "ignore_eos": True}
    cancelled = submit(engine, PROMPTS[0], **long)
    running = submit(engine, PROMPTS[1], **long)
    deadline = time.monotonic() + 30
    while engine.load()[0] < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    engine.cancel(next(iter(engine._seqs)))  # the first submitted request
    r = cancelled.get()
    assert (r.finish_reason, r.abort_reason) == ("abort", "cancelled")
    staged = read_weights(engine.model, perturbed_checkpoint(model_dir, tmp_path / "v2"))
    done = Waiter()
    engine.update_weights(staged, 2, True, done)
    assert done.done.wait(30) and done.result.aborted == 1
    r = running.get()
    # aborted before the copy: every token it holds came from the old weights
    assert (r.finish_reason, r.abort_reason, r.policy_version_final) == (
        "abort",
        "weight_update",
        0,
    )
    assert 0 < len(r.token_ids) < 3000
    assert engine.load() == (0, 0)


def test_shutdown_aborts_waiting_requests(model_dir):
    loaded = load_model(model_dir)
    eng = Engine(loaded.model, loaded.eos_ids, max_model_len=4096, max_batch_size=1)
    eng.start()
    waiters = [submit(eng, PROMPTS[0], max_tokens=3000, ignore_eos=True) for _ in range(3)]
    eng.shutdown()
    results = [w.get() for w in waiters]
    assert {(r.finish_reason, r.abort_reason) for r in results} == {("abort", "shutdown")}
    with pytest.raises(RuntimeError, match="not running"):
        eng.submit(PROMPTS[0], SamplingParams(max_tokens=3), lambda r: None)


def test_static_backend_reports_kv_usage_and_refuses_over_capacity(model_dir):
    from swefleet.inference.engine.metrics import render

    loaded = load_model(model_dir)
    eng = Engine(
        loaded.model,
        loaded.eos_ids,
        max_model_len=4096,
        max_batch_size=2,
        kv_mode="static",
        kv_capacity=512,
    )
    assert eng.max_model_len == 512 and eng.kv_mode == "StaticKV"
    with pytest.raises(ValueError, match="max_model_len"):
        eng.submit([1] * 500, SamplingParams(max_tokens=13), lambda r: None)
    eng.start()
    try:
        waiter = submit(eng, [1] * 100, max_tokens=400, ignore_eos=True)
        deadline = time.monotonic() + 30
        while eng.load()[0] < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        usage = eng.kv_usage()
        assert usage is not None and 100 / 1024 <= usage <= 500 / 1024
        assert "vllm:kv_cache_usage_perc" in render(eng, "m")
        assert len(waiter.get().token_ids) == 400
        assert eng.kv_usage() == 0.0
    finally:
        eng.shutdown()
    dynamic = Engine(loaded.model, loaded.eos_ids, max_model_len=4096, kv_mode="auto")
    assert dynamic.kv_mode == "DynamicKV" and dynamic.kv_usage() is None  # auto on CPU


def test_static_cache_forward_matches_transformers_logits(model_dir):
    """Prefill of right-padded prompts and per-row decode positions give transformers' logits."""
    from swefleet.inference.engine.static import StaticCache

    loaded = load_model(model_dir)
    cache = StaticCache(loaded.model, slots=3, capacity=256)
    prompts = [PROMPTS[1], PROMPTS[0], PROMPTS[3]]
    with torch.inference_mode():
        logits = cache.prefill(prompts, [2, 0, 1])
        nxt = [int(t) for t in logits.argmax(-1)]
        step = cache.decode(
            torch.tensor([nxt[1], nxt[2], nxt[0]]),
            torch.tensor([len(prompts[1]), len(prompts[2]), len(prompts[0])]),
            width=256,
        )
        for i, (p, t) in enumerate(zip(prompts, nxt, strict=True)):
            ref = loaded.model(input_ids=torch.tensor([p + [t]])).logits[0].float()
            assert torch.allclose(logits[i], ref[-2], atol=1e-4)
            row = [2, 0, 1][i]
            assert torch.allclose(step[row], ref[-1], atol=1e-4)
