"""GGUF -> Hugging Face folder on a tiny Qwen2 GGUF written by gguf itself: the weights are
gguf's own dequantization in bf16, the folder loads strict in transformers and runs, the
tokenizer round-trips (transformers' and swefleet's), and the config comes from the header."""

from __future__ import annotations

import json

import numpy as np
import pytest

from swefleet.models.progress import Steps
from swefleet.models.weights import hf_name
from tests.tiny_gguf import CHAT_TEMPLATE, SHAPE, tensors, vocabulary, write_tiny_gguf

pytestmark = pytest.mark.unit

TEXTS = ["def sum(x):\n    return x", "Write a function   that returns\ttabs\n\n", "é ü 漢字 🙂",
         "<|im_end|> in a file stays text", ""]


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    from swefleet.models.convert import gguf_to_hf

    root = tmp_path_factory.mktemp("convert")
    gguf_file = write_tiny_gguf(root / "tiny.gguf")
    lines: list[str] = []
    gguf_to_hf(gguf_file, root / "hf", Steps(bars=False, say=lines.append))
    return gguf_file, root / "hf", lines


def test_weights_are_ggufs_own_dequantization_in_bf16(converted):
    import torch
    from gguf import GGUFReader
    from gguf.quants import dequantize
    from safetensors.torch import load_file

    gguf_file, hf, _ = converted
    saved = load_file(str(hf / "model.safetensors"))
    reader = GGUFReader(str(gguf_file))
    kinds = {t.tensor_type.name for t in reader.tensors}
    assert {"F32", "F16", "Q8_0", "Q4_K", "Q6_K"} <= kinds
    assert len(saved) == len(reader.tensors)
    for t in reader.tensors:
        want = torch.from_numpy(np.array(dequantize(t.data, t.tensor_type), np.float32))
        want = want.reshape(tuple(reversed(t.shape.tolist()))).to(torch.bfloat16)
        got = saved[hf_name(t.name)]
        assert got.dtype == torch.bfloat16 and torch.equal(got, want), t.name
    source = {name: data for name, data, kind in tensors() if kind == "F32"}
    q_bias = saved["model.layers.0.self_attn.q_proj.bias"]
    assert torch.equal(q_bias, torch.from_numpy(source["blk.0.attn_q.bias"]).to(torch.bfloat16))
    assert saved["lm_head.weight"].shape == (len(vocabulary()[0]), SHAPE["hidden"])


def test_folder_loads_strict_in_transformers_and_generates(converted):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    _, hf, _ = converted
    model, info = AutoModelForCausalLM.from_pretrained(hf, output_loading_info=True)
    assert {k: list(v) for k, v in info.items()} == {
        "missing_keys": [], "unexpected_keys": [], "mismatched_keys": [], "error_msgs": []}
    assert model.config.tie_word_embeddings is False and model.dtype == torch.bfloat16
    assert model.config.rope_parameters["rope_theta"] == 1e6
    tok = AutoTokenizer.from_pretrained(hf)
    enc = tok.apply_chat_template([{"role": "user", "content": "Write a function"}],
                                  add_generation_prompt=True, return_dict=True,
                                  return_tensors="pt")
    out = model.generate(**enc, max_new_tokens=4, do_sample=False)
    assert out.shape[1] == enc["input_ids"].shape[1] + 4
    logits = model(**enc).logits
    assert torch.isfinite(logits).all() and logits.shape[-1] == len(vocabulary()[0])


def test_config_and_generation_config_come_from_the_header(converted):
    _, hf, _ = converted
    cfg = json.loads((hf / "config.json").read_text())
    tokens = vocabulary()[0]
    assert cfg["model_type"] == "qwen2" and cfg["architectures"] == ["Qwen2ForCausalLM"]
    assert (cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_attention_heads"],
            cfg["num_key_value_heads"], cfg["intermediate_size"], cfg["max_position_embeddings"]
            ) == (2, 64, 4, 2, 256, 512)
    assert cfg["rms_norm_eps"] == 1e-6 and cfg["rope_theta"] == 1e6
    assert cfg["tie_word_embeddings"] is False and cfg["torch_dtype"] == "bfloat16"
    assert cfg["eos_token_id"] == tokens.index("<|im_end|>")
    assert cfg["vocab_size"] == len(tokens)
    gen = json.loads((hf / "generation_config.json").read_text())
    assert gen["eos_token_id"] == [tokens.index("<|im_end|>"), tokens.index("<|endoftext|>")]


def test_tokenizer_round_trips_and_matches_swefleets(converted):
    from swefleet.agents.tokenizer import Tokenizer
    from transformers import AutoTokenizer

    _, hf, _ = converted
    theirs = AutoTokenizer.from_pretrained(hf)
    ours = Tokenizer.from_dir(hf)
    tokens = vocabulary()[0]
    assert ours.eos_id == ours.im_end_id == tokens.index("<|im_end|>")
    assert ours.im_start_id == tokens.index("<|im_start|>")
    conf = json.loads((hf / "tokenizer_config.json").read_text())
    assert conf["eos_token"] == "<|im_end|>" and conf["pad_token"] == "<|endoftext|>"
    for text in TEXTS:
        ids = ours.encode(text)
        assert ours.decode(ids) == text and theirs.decode(ids) == text
        if "<|" not in text:  # swefleet's encode keeps special-token text as text
            assert theirs.encode(text, add_special_tokens=False) == ids
    assert len(ours.encode("def")) == 1  # the merges apply
    assert theirs.encode("<|im_end|>", add_special_tokens=False) == [ours.im_end_id]


def test_chat_template_is_the_ggufs(converted):
    from transformers import AutoTokenizer

    _, hf, _ = converted
    assert (hf / "chat_template.jinja").read_text() == CHAT_TEMPLATE
    text = AutoTokenizer.from_pretrained(hf).apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"


def test_each_long_step_is_timed(converted):
    lines = converted[2]
    assert [line.split(":")[0] for line in lines] == ["read GGUF header", "convert weights (bf16)",
                                                      "convert tokenizer"]


def test_weights_are_sharded_with_an_index_when_large(converted, tmp_path):
    from gguf import GGUFReader
    from safetensors.torch import load_file

    from swefleet.models.weights import write_weights

    gguf_file, hf, _ = converted
    names = write_weights(GGUFReader(str(gguf_file)), tmp_path, lambda n: None,
                          shard_bytes=64 * 1024)
    index = json.loads((tmp_path / "model.safetensors.index.json").read_text())
    files = sorted(set(index["weight_map"].values()))
    assert len(files) > 1 and sorted(index["weight_map"]) == sorted(names)
    whole = load_file(str(hf / "model.safetensors"))
    for file in files:
        for name, tensor in load_file(str(tmp_path / file)).items():
            assert tensor.equal(whole[name])


def test_a_tensor_with_no_qwen2_counterpart_is_refused():
    assert hf_name("blk.3.attn_v.bias") == "model.layers.3.self_attn.v_proj.bias"
    assert hf_name("output.weight") == "lm_head.weight"
    with pytest.raises(ValueError, match="blk.0.ffn_gate_exps.weight has no Qwen2 counterpart"):
        hf_name("blk.0.ffn_gate_exps.weight")
