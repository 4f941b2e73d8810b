"""Layout validation: each bad layout is one line naming the field; the estimate on a tiny
shape whose parameter count is computed by hand."""

import pytest

from swefleet.app.cli import main
from swefleet.app.plan.estimate import model_params, plan
from swefleet.app.plan.layout import validate_layout

pytestmark = pytest.mark.unit

TINY = {"hidden_size": 4, "num_layers": 2, "num_heads": 2, "num_kv_heads": 1, "head_dim": 3,
        "vocab_size": 10, "intermediate_size": 8}
WORK = {"seq_len": 100, "rollouts_per_step": 4, "prompt_tokens": 30, "completion_tokens": 20}


def _layout(**over):
    data = {"model": dict(TINY), "workload": dict(WORK), "cluster": {"nodes": 1},
            "trainer": {"gpus": 2}, "inference": {"servers": 2}}
    for key, value in over.items():
        section, _, field = key.partition("__")
        data.setdefault(section, {})[field] = value
    return data


@pytest.mark.parametrize(("over", "needle"), [
    ({"model__num_kv_heads": 3}, "num_kv_heads=3 must divide num_heads=2"),
    ({"model__num_experts": 4, "model__top_k": 5, "model__moe_intermediate_size": 2},
     "top_k=5 must be in 1..num_experts=4"),
    ({"model__top_k": 2}, "need num_experts > 0"),
    ({"model__colour": 1}, "model.colour: Extra inputs are not permitted"),
    ({"workload__completion_tokens": 90}, "exceeds seq_len=100"),
    ({"trainer__gpus": 7}, "roles need 9 GPUs (inference 2, trainer 7) but the cluster has 8"),
    ({"trainer__expert_parallel": 3}, "expert_parallel=3 must divide trainer gpus=2"),
    ({"gpu__hbm_tb_s": 0}, "gpu.hbm_tb_s: Input should be greater than 0"),
])
def test_bad_layout_is_one_line(over, needle):
    with pytest.raises(ValueError) as e:
        validate_layout(_layout(**over), "x.toml")
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith("x.toml: ") and needle in msg, msg


def test_cli_error_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text("[model]\nhidden_size = 4\n")
    assert main(["plan", "--layout", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("swefleet plan: error: "), err


def test_tiny_dense_params_and_plan():
    lay = validate_layout(_layout())
    p = model_params(lay.model)
    # per layer: attention 4x3x(2x2+2x1) = 72, MLP 3x4x8 = 96 -> 168; 2 layers 336;
    # embedding 10 x 4 = 40 and an untied lm_head 40 -> 416; matmul: 336 + lm_head 40
    assert p["total"] == 416 and p["matmul_active"] == 376
    out = plan(lay)
    assert out["gpus"] == {"inference": 2, "trainer": 2, "idle": 4, "total": 8}
    # 4 rollouts x 50 tokens; 6 x 376 x 200 = 451,200 matmul FLOPs
    assert out["trainer"]["tokens_per_step"] == 200
    assert out["trainer"]["flops_matmul"] == 451_200
    # KV: 2 layers x 2 x 1 kv head x 3 dims x 2 bytes = 24 bytes a token
    assert out["inference"]["kv_bytes_per_token"] == 24
    assert out["step"]["step_s"] == pytest.approx(
        max(out["step"]["rollout_s"], out["step"]["train_s"]) + out["step"]["weight_sync_s"])


def test_tiny_moe_params():
    lay = validate_layout(_layout(model__num_experts=4, model__top_k=2,
                                  model__moe_intermediate_size=8, model__shared_experts=1,
                                  model__dense_layers=1))
    p = model_params(lay.model)
    # dense layer 168; MoE layer: attention 72 + (4+1) x 96 + router 16 = 568; + 80 embeddings
    assert p["total"] == 168 + 568 + 80 and p["experts"] == 4 * 96 and p["moe_layers"] == 1
    # active MoE layer: 72 + (2+1) x 96 + 16 = 376; matmul: 168 + 376 + lm_head 40
    assert p["matmul_active"] == 584
