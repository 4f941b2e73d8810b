"""Router replay on CUDA: the embedded engine (bf16) returns routed experts; the trainer
(fp32 master weights, bf16 autocast, varlen) replaying them gets a much lower mismatch KL."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def test_replay_cuts_mismatch_kl_on_cuda(tmp_path):
    from swefleet.trainer.replay_check import (
        SHAPES,
        engine_rollouts,
        make_moe_checkpoint,
        trainer_mismatch,
    )

    shape = SHAPES["small"]
    ckpt = make_moe_checkpoint(
        tmp_path / "moe", shape, gain=1.0, dtype=torch.bfloat16, device="cuda"
    )
    gen = torch.Generator().manual_seed(0)
    prompts = [
        torch.randint(1, shape["vocab_size"], (64,), generator=gen).tolist() for _ in range(8)
    ]
    rollouts = engine_rollouts(ckpt, prompts, 64, device="cuda", dtype="bfloat16")
    for r in rollouts:
        want = (64 + 64 - 1, shape["num_hidden_layers"], shape["num_experts_per_tok"])
        assert r.routed.shape == want and r.routed.dtype == np.uint8
    m = trainer_mismatch(
        ckpt, rollouts, device="cuda", attention="varlen", autocast_dtype=torch.bfloat16
    )
    print({k: v for k, v in m.items() if not k.startswith("logp")})
    assert m["expert_agreement"] < 1.0  # bf16 kernels differ: some routing flips
    # replay removes the routing part of the mismatch (CPU, same shape: 17-33x; the >= 10x
    # target of issue #7 is measured by benchmarks/router_replay.py on the 30B-A3B shape)
    assert m["kl_with_replay"] * 5 <= m["kl_without_replay"]
