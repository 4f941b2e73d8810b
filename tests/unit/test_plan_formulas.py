"""Every planner formula on small cases computed by hand (the arithmetic is in the comments)."""

import pytest

from swefleet.app.plan import formulas as f

pytestmark = pytest.mark.unit


def test_param_counts():
    assert f.swiglu_params(4, 8) == 96  # 3 x 4 x 8
    assert f.gqa_attention_params(4, 2, 1, 3) == 72  # 4 x 3 x (2x2 + 2x1) = 12 x 6
    # (4 experts + 1 shared) x 96 + router 4 x 4 = 480 + 16
    assert f.moe_layer_params(4, 8, 4, 1) == 496
    # (top 2 + 1 shared) x 96 + router 16 = 288 + 16
    assert f.moe_active_params(4, 8, 4, 2, 1) == 304


def test_kv_bytes_and_capacity():
    # 2 layers x (2 x 2 kv heads x 4 dims = 16 elems x 2 bytes + 3 indexer bytes) = 2 x 35
    assert f.kv_bytes_per_token(2, 16, 2, 3) == 70
    # dp 2 x 1000 free bytes x shard 2 / 100 bytes a token = 40 tokens
    assert f.kv_capacity_tokens(1000, 100, 2, 2) == 40


def test_experts_touched():
    assert f.experts_touched_fraction(4, 2, 1) == 0.5  # one token touches 2 of 4
    assert f.experts_touched_fraction(4, 2, 2) == pytest.approx(0.75)  # 1 - 0.5^2


def test_decode_and_compute_time():
    # (600 + 400 bytes) / (1000 B/s x 0.5) = 2 s
    assert f.decode_step_seconds(600, 400, 1000, 0.5) == 2.0
    # 1200 FLOPs / (2 GPUs x 100 FLOP/s x 0.5) = 12 s
    assert f.compute_seconds(1200, 2, 100, 0.5) == 12.0


def test_router_replay_and_rates():
    assert f.router_replay_bytes_per_token(3, 2, 256) == 6  # 3 x 2 x uint8
    assert f.router_replay_bytes_per_token(3, 2, 512) == 12  # uint16 beyond 256 experts
    assert f.gbit_s(125e6) == 1.0  # 125 MB/s x 8 = 1 Gbit/s
    assert f.kv_offload_bytes_per_turn(10, 7) == 140  # out and back: 2 x 10 x 7


def test_train_flops():
    assert f.train_matmul_flops(5, 10) == 300  # 6 x 5 x 10
    # dense: 12 x 1 layer x 2 heads x 3 dims x 4^2/2 = 72 x 8 = 576 (= 6 L H d S^2)
    assert f.train_attention_flops(1, 2, 3, 4) == 576
    # window 2 < 4: attended = 4 x 2 - 2^2/2 = 6, 72 x 6
    assert f.train_attention_flops(1, 2, 3, 4, window=2) == 432
    assert f.train_attention_flops(1, 2, 3, 4, window=8) == 576  # window >= seq: dense


def test_trainer_memory():
    # 100 params over 4 ranks: 100 x 4 / 4, 100 x 4 / 4, 100 x 8 / 4
    assert f.sharded_state_bytes(100, 4, 4, 4, 8) == {"weights": 100, "grads": 100,
                                                      "optimizer": 200}
    # 2 x (4h=16 + qkv 2x3 + 2x1x3 = 12 + attn out 6 + 3 x mlp 5 = 15) = 2 x 49
    assert f.activation_bytes_per_token_layer(4, 2, 1, 3, 5, 2) == 98
    assert f.activation_bytes(10, 3, 98, 4, "none", 4) == 2940  # 3 x 10 x 98
    assert f.activation_bytes(10, 3, 98, 4, "selective", 4) == 1470  # half
    # full: 10 tokens x 3 layers x 4 x 4 bytes = 480, plus one block 10 x 98 = 980
    assert f.activation_bytes(10, 3, 98, 4, "full", 4) == 1460
    assert f.logits_bytes(10, 7, 2) == 140


def test_ep_bytes():
    # 2 x 10 tokens x top 2 x hidden 4 x 2 bytes x (4-1)/4 = 320 x 0.75
    assert f.ep_dispatch_combine_bytes(10, 2, 4, 2, 4) == 240
    assert f.ep_dispatch_combine_bytes(10, 2, 4, 2, 1) == 0  # nothing leaves a single rank


def test_sync_step_and_cost():
    assert f.transfer_seconds(100, 10) == 10
    assert f.transfer_seconds(100, 10, parallel=4) == 2.5
    assert f.filesystem_sync_seconds(100, 10) == 20  # written, then read
    assert f.step_seconds(5, 3, 1, "async") == 6  # max(5, 3) + 1
    assert f.step_seconds(5, 3, 1, "sync") == 9
    # 10 GPUs x 60 s / 60 / 5 rollouts = 2 GPU-minutes; 2 / 60 h x 3.0 = 0.1
    price, gpu_min = f.cost_per_rollout(10, 60, 5, 3.0)
    assert gpu_min == 2 and price == pytest.approx(0.1)
