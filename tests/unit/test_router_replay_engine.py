"""Routed experts from the embedded engine (tiny Qwen3-MoE, CPU): vLLM's shape and dtype, and
the same expert choice as one plain full forward of the whole sequence."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from swefleet.inference.engine.core import Engine, GenerationResult, SamplingParams
from swefleet.inference.engine.experts import RoutingCapture, _split_prefill
from swefleet.inference.engine.model import load_model
from swefleet.trainer.replay_check import SHAPES, make_moe_checkpoint

from swefleet import routed_experts

pytestmark = pytest.mark.unit
SHAPE = SHAPES["tiny"]
L, K, E = SHAPE["num_hidden_layers"], SHAPE["num_experts_per_tok"], SHAPE["num_experts"]


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory):
    return make_moe_checkpoint(tmp_path_factory.mktemp("moe") / "tiny", "tiny", gain=1.0)


@pytest.fixture(scope="module")
def engine(moe_dir):
    torch.set_num_threads(1)
    loaded = load_model(moe_dir)
    eng = Engine(loaded.model, frozenset(), max_model_len=1024, max_batch_size=4)
    eng.start()
    yield eng
    eng.shutdown()


def _generate(engine: Engine, prompts: list[list[int]], max_tokens: list[int]) -> list:
    results: list = [None] * len(prompts)
    done = threading.Semaphore(0)
    for i, (prompt, n) in enumerate(zip(prompts, max_tokens, strict=True)):

        def on_done(value, i=i):
            results[i] = value
            done.release()

        engine.submit(prompt, SamplingParams(max_tokens=n, seed=i, ignore_eos=True), on_done)
    for _ in prompts:
        assert done.acquire(timeout=60), "engine did not answer"
    assert all(isinstance(r, GenerationResult) for r in results), results
    return results


def _full_forward_routing(model, ids: list[int]) -> np.ndarray:
    """Top-k expert ids per token and layer from one forward with router logits: [T, L, K]."""
    with torch.no_grad():
        out = model(input_ids=torch.tensor([ids]), output_router_logits=True)
    per_layer = [
        torch.topk(torch.softmax(lg.float(), -1), K, -1).indices for lg in out.router_logits
    ]
    return torch.stack(per_layer, 1).numpy()


def test_engine_routing_has_vllm_shape_and_matches_full_forward(engine):
    """Several prompts in one continuous batch (joining and leaving at different steps): each
    sequence gets (prompt + generated - 1, layers, top_k) uint8, equal (as sets) to the routing
    of a full forward of prompt + generated tokens (the last token excluded: never forwarded)."""
    prompts = [list(range(3, 3 + n)) for n in (5, 17, 1, 9)]
    max_tokens = [12, 3, 20, 1]
    results = _generate(engine, prompts, max_tokens)
    for prompt, n, r in zip(prompts, max_tokens, results, strict=True):
        ids = r.routed_experts
        assert ids.shape == (len(prompt) + n - 1, L, K) and ids.dtype == np.uint8
        ref = _full_forward_routing(engine.model, prompt + r.token_ids)[:-1]
        assert np.array_equal(np.sort(ids, -1), np.sort(ref, -1))
        assert len({tuple(row) for row in ids.reshape(-1, K)}) > 3  # not a constant routing
        # the wire round trip (base64 .npy) is lossless
        assert np.array_equal(routed_experts.decode(routed_experts.encode(ids)), ids)


def test_dense_model_and_disabled_capture_return_none(moe_dir, tmp_path):
    from swefleet.inference.testing import tiny_checkpoint

    dense = load_model(tiny_checkpoint(tmp_path))
    off = load_model(moe_dir)
    for model, enabled in ((dense.model, True), (off.model, False)):
        eng = Engine(model, frozenset(), max_model_len=256, routed_experts=enabled)
        eng.start()
        try:
            (r,) = _generate(eng, [[5, 6, 7]], [4])
        finally:
            eng.shutdown()
        assert r.routed_experts is None and len(r.token_ids) == 4


def test_prefill_layouts_and_prefix_cache_contract(moe_dir):
    """Sequential and right-padded prefill layouts split per prompt; cached prefix tokens must
    come with their routing (else a clear error)."""
    rows = [np.full((n, L, K), i, dtype=np.uint8) for i, n in enumerate((2, 3))]
    seq = _split_prefill([np.concatenate(rows)], [2, 3])
    assert [p.tolist() for p in seq] == [r.tolist() for r in rows]
    grid = np.zeros((2, 3, L, K), dtype=np.uint8)
    grid[0, :2], grid[1] = rows[0], rows[1]
    padded = _split_prefill([grid.reshape(6, L, K)], [2, 3])
    assert [p.tolist() for p in padded] == [r.tolist() for r in rows]
    with pytest.raises(RuntimeError, match="unknown layout"):
        _split_prefill([np.zeros((7, L, K), np.uint8)], [2, 3])

    model = load_model(moe_dir).model
    capture = RoutingCapture.attach(model)
    try:
        capture.start()
        with pytest.raises(RuntimeError, match="prefix cache without their routed experts"):
            capture.after_prefill(["s"], [5], [2])
        cached = np.full((2, L, K), 7, dtype=np.uint8)
        capture.start()
        with torch.no_grad():  # the 3 tokens a prefix-cached prefill would forward
            model(input_ids=torch.tensor([[9, 10, 11]]))
        capture.after_prefill(["s"], [5], [2], [cached])
        got = capture.pop("s")
        assert got.shape == (5, L, K) and (got[:2] == 7).all()
        assert np.array_equal(
            np.sort(got[2:], -1), np.sort(_full_forward_routing(model, [9, 10, 11]), -1)
        )
        assert capture.pop("s") is None
    finally:
        capture.detach()
