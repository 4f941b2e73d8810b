"""FLOPs formulas (MFU) and the FSDP sample split."""

from __future__ import annotations

import numpy as np
import pytest
from swefleet.trainer.flops import matmul_params, peak_flops, step_flops, titan_step_flops
from swefleet.trainer.step import rank_sample_range

from benchmarks.shapes import QWEN3_SHAPES

pytestmark = pytest.mark.unit

QWEN3_1_7B = QWEN3_SHAPES["qwen3-1.7b"]


def test_titan_convention_reproduces_the_h200_anchor():
    # shared/notes/TRAINER.md: torchtitan 0.2.2, Qwen3-1.7B, 8192 x 2, 27,895 tokens/s = 39.8 % MFU
    per_step = titan_step_flops(QWEN3_1_7B, [8192, 8192], 8192)
    mfu = per_step / (16384 / 27_895) / peak_flops("NVIDIA H200")
    assert mfu == pytest.approx(0.398, abs=0.001)


def test_step_flops_counts_the_lm_head_and_causal_attention():
    n = matmul_params(QWEN3_1_7B)
    assert n == 28 * (2048 * 2048 * 2 + 2048 * 1024 * 2 + 3 * 2048 * 6144) + 151936 * 2048
    one = step_flops(QWEN3_1_7B, [8192])
    attention = 6 * 28 * 16 * 128 * 8192**2
    assert one == 6 * n * 8192 + attention
    # packing shorter samples: same linear work, attention only within each sample
    assert step_flops(QWEN3_1_7B, [4096, 4096]) == 6 * n * 8192 + attention / 2
    assert step_flops(QWEN3_1_7B, [8192, 8192]) / titan_step_flops(
        QWEN3_1_7B, [8192, 8192], 8192
    ) == pytest.approx(0.93, abs=0.01)
    assert peak_flops("cpu") is None


def test_rank_sample_range_balances_tokens_and_covers_every_sample():
    cu = np.array([0, 10, 40, 45, 50, 90])
    ranges = [rank_sample_range(cu, r, 2) for r in range(2)]
    assert ranges == [(0, 3), (3, 5)]  # 45 | 45 tokens
    assert [rank_sample_range(cu, r, 3) for r in range(3)] == [(0, 2), (2, 4), (4, 5)]
    # fewer samples than ranks: a rank may get none (it runs zero-weight fillers)
    assert [rank_sample_range(np.array([0, 5]), r, 2) for r in range(2)] == [(0, 0), (0, 1)]


def test_step_mfu_from_the_batch_lengths():
    from swefleet.trainer.flops import step_flops, step_mfu

    hf = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
          "num_key_value_heads": 2, "head_dim": 16, "intermediate_size": 128, "vocab_size": 256}
    cu = [0, 100, 250]
    want = step_flops(hf, [100, 150]) / 0.5 / (989e12 * 2)
    assert step_mfu(hf, cu, 0.5, "NVIDIA H200", world=2) == pytest.approx(want)
    assert step_mfu(hf, cu, 0.5, "cpu") is None
    assert step_mfu({**hf, "num_experts": 8}, cu, 0.5, "NVIDIA H200") is None
