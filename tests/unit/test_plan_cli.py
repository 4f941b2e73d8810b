"""`swefleet plan` prints tables and one JSON object as its last line, for the reference
layout and for a run config."""

import json
from pathlib import Path

import pytest

from swefleet.app.cli import main

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def _json_last_line(capsys, argv) -> dict:
    assert main(argv) == 0
    out = capsys.readouterr().out.rstrip("\n").splitlines()
    assert len(out) > 10  # the tables come first
    return json.loads(out[-1])


def test_reference_layout(capsys):
    plan = _json_last_line(capsys, ["plan", "--layout",
                                    str(ROOT / "configs/layouts/glm5_28x8.toml")])
    assert plan["gpus"]["total"] == 224 and plan["gpus"]["idle"] == 0
    # GLM-5 is published as 744B total, 40B active
    assert plan["params"]["total"] == pytest.approx(744e9, rel=0.01)
    assert plan["params"]["active"] == pytest.approx(41e9, rel=0.05)
    # MLA latent (512 + 64) x 2 bytes + 132 indexer bytes, over 78 layers
    assert plan["inference"]["kv_bytes_per_token"] == 78 * (576 * 2 + 132)
    assert plan["traffic"]["router_replay_bytes_per_token"] == 75 * 8  # uint8 ids
    assert plan["trainer"]["mem_fits"] is True
    step = plan["step"]
    assert step["step_s"] == pytest.approx(max(step["rollout_s"], step["train_s"])
                                           + step["weight_sync_s"])
    assert plan["cost"]["currency"] == "USD" and plan["cost"]["per_rollout"] > 0


def test_run_config(capsys):
    plan = _json_last_line(capsys, ["plan", "--config", str(ROOT / "configs/gpu_vllm.toml")])
    assert plan["model"] == "qwen3-0.6b" and plan["gpus"]["total"] == 1  # shared GPU 0
    assert plan["trainer"]["tokens_per_step"] == 64 * (256 + 64)  # 8 groups x 8 rollouts
    # qwen3-0.6b preset: 28 layers x 2 x 8 kv heads x 128 x bf16
    assert plan["inference"]["kv_bytes_per_token"] == 28 * 2 * 8 * 128 * 2
    assert plan["trainer"]["mem_room_gib_per_gpu"] == pytest.approx(140 * 0.65)


def test_moe_run_config(capsys):
    plan = _json_last_line(capsys, ["plan", "--config",
                                    str(ROOT / "configs/gpu_moe_vllm.toml")])
    assert plan["params"]["moe_layers"] == 12 and "router_replay_gbit_s_fleet" in plan["traffic"]


def test_hf_config_with_mla(tmp_path, capsys):
    """`--config` with a checkpoint whose config.json is DeepSeek/GLM-style (MLA + MoE)."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({
        "hidden_size": 8, "num_hidden_layers": 2, "num_attention_heads": 2,
        "num_key_value_heads": 2, "vocab_size": 16, "intermediate_size": 4,
        "kv_lora_rank": 4, "q_lora_rank": 2, "qk_rope_head_dim": 1, "qk_nope_head_dim": 3,
        "v_head_dim": 4, "n_routed_experts": 4, "num_experts_per_tok": 2,
        "moe_intermediate_size": 2, "n_shared_experts": 1, "first_k_dense_replace": 1}))
    run = tmp_path / "run.toml"
    run.write_text(f'[model]\npath = "{ckpt}"\n[inference]\ngpus = [0]\n[trainer]\ngpus = [0]\n')
    plan = _json_last_line(capsys, ["plan", "--config", str(run)])
    # attention: q_a 8x2 + q_b 2x2x(3+1) + kv_a 8x(4+1) + kv_b 4x2x(3+4) + o 2x4x8
    #          = 16 + 16 + 40 + 56 + 64 = 192 a layer
    # dense layer: 192 + MLP 3x8x4 = 288; MoE layer: 192 + (4+1) x 3x8x2 + router 8x4 = 464
    # embeddings 16x8 = 128, untied lm_head 128
    assert plan["params"]["total"] == 288 + 464 + 256
    # KV: the latent 4 + 1 rope elements x 2 bytes x 2 layers
    assert plan["inference"]["kv_bytes_per_token"] == 20


def test_eight_gpu_layout_matches_its_run_config_and_the_hf_model(capsys):
    """configs/layouts/qwen3_30b_a3b_8xh200.toml and configs/gpu_8x_moe.toml describe the same
    4 + 4 split of one 8-GPU host, and the planner counts the parameters the `qwen3-30b-a3b`
    preset's HF model really has (built on the meta device: no memory)."""
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    from swefleet.tinymodel import PRESETS

    layout = _json_last_line(capsys, ["plan", "--layout", str(
        ROOT / "configs/layouts/qwen3_30b_a3b_8xh200.toml")])
    run = _json_last_line(capsys, ["plan", "--config", str(ROOT / "configs/gpu_8x_moe.toml")])
    assert layout["gpus"] == run["gpus"] == {"inference": 4, "trainer": 4, "idle": 0, "total": 8}
    assert layout["trainer"]["mem_fits"] is True
    shape = {k: v for k, v in PRESETS["qwen3-30b-a3b"].items()
             if k not in ("save_dtype", "init_in_save_dtype")}
    with torch.device("meta"):
        model = Qwen3MoeForCausalLM(Qwen3MoeConfig(**shape, tie_word_embeddings=False))
    hf_params = sum(p.numel() for p in model.parameters())
    # the planner leaves out the RMSNorm weights: 2 per layer of the hidden size, q/k norms of
    # head_dim, and the final norm
    norms = shape["num_hidden_layers"] * (2 * shape["hidden_size"] + 2 * shape["head_dim"]) \
        + shape["hidden_size"]
    assert layout["params"]["total"] == run["params"]["total"] == hf_params - norms


def test_direct_init_builds_in_the_save_dtype_and_restores_the_default():
    """The path the `qwen3-30b-a3b` preset takes (no fp32 host copy), on a tiny MoE shape."""
    import torch
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    from swefleet.tinymodel import PRESETS, _init_direct

    shape = dict(PRESETS["tiny-moe"])
    model = _init_direct(Qwen3MoeForCausalLM, Qwen3MoeConfig(**shape), torch.bfloat16)
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert torch.get_default_dtype() == torch.float32
    assert all(p.float().std() > 0 for p in model.parameters() if p.dim() == 2)
