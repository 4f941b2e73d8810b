"""Router replay end to end on CPU: the trainer replaying the embedded engine's routed experts
reproduces the engine's log-probs; the step reports per-expert load."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from swefleet.trainer.config import TrainerConfig
from swefleet.trainer.replay_check import (
    SHAPES,
    engine_rollouts,
    make_moe_checkpoint,
    rollout_batch,
    trainer_mismatch,
)
from swefleet.trainer.step import build_optimizer, train_step
from swefleet.trainer.titan import load_policy

from swefleet import routed_experts

pytestmark = pytest.mark.unit
SHAPE = SHAPES["tiny"]
L, K, E = SHAPE["num_hidden_layers"], SHAPE["num_experts_per_tok"], SHAPE["num_experts"]


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory):
    return make_moe_checkpoint(tmp_path_factory.mktemp("moe") / "tiny", "tiny", gain=1.0)


@pytest.fixture(scope="module")
def rollouts(moe_dir):
    torch.set_num_threads(1)
    prompts = [list(range(5, 5 + n)) for n in (6, 11, 3)]
    return engine_rollouts(moe_dir, prompts, 10)


def test_replaying_engine_routing_reproduces_engine_logprobs(moe_dir, rollouts):
    m = trainer_mismatch(moe_dir, rollouts)
    arrays = rollout_batch(rollouts, replay=True)
    mask = arrays["loss_mask"]
    engine_logp = arrays["inference_logprobs"][mask]
    assert np.abs(m["logp_with_replay"][mask] - engine_logp).max() < 1e-4
    assert m["kl_with_replay"] < 1e-8 and np.std(engine_logp) > 0.3
    assert m["expert_agreement"] == 1.0  # float32, same weights: the same experts either way


def test_step_reports_expert_load_of_the_routing_used(moe_dir, rollouts):
    replayed = rollout_batch(rollouts, replay=True)
    forced = {**replayed, "routed_experts": ((replayed["routed_experts"] + 3) % E)}
    cfg = TrainerConfig(device="cpu", lr=1e-4, micro_batch_tokens=24)  # several micro-batches
    n_tokens = len(replayed["tokens"])
    for arrays, replay in ((forced, True), (rollout_batch(rollouts, replay=False), False)):
        policy = load_policy(moe_dir, torch.device("cpu"), "sdpa")
        metrics = train_step(policy, build_optimizer(policy, cfg), arrays, cfg)
        load = np.array(metrics["moe_load"])
        assert load.shape == (L, E) and (load.sum(1) == n_tokens * K).all()
        assert metrics["moe_replay"] == float(replay)
        assert metrics["moe_load_max_over_mean"] >= 1.0 >= metrics["moe_load_min_over_mean"]
        if replay:  # exactly the batch's (forced) routing, padding rows excluded
            assert load.tolist() == routed_experts.expert_load(forced["routed_experts"], E).tolist()
