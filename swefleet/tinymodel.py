"""Project-made small models: a byte-level BPE tokenizer trained here and a random-init Qwen3
(or Qwen3-MoE, or Qwen2), saved in the standard Hugging Face format so the same loading code
serves real checkpoints.

No weights are downloaded: the tokenizer is trained on Python's own standard-library sources
(always on disk), the model is initialised from a seed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")

#: One dial per preset: sizes of the Qwen3 shape. `tiny` is for CPU tests and the quickstart.
PRESETS: dict[str, dict] = {
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
             "vocab_size": 1024},
    "small": {"hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 4,
              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
              "vocab_size": 4096},
    # Qwen3-MoE (presets with `num_experts`): every layer sparse, softmax top-k, normalised.
    "tiny-moe": {"hidden_size": 64, "intermediate_size": 128, "moe_intermediate_size": 32,
                 "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                 "head_dim": 16, "vocab_size": 1024, "num_experts": 8,
                 "num_experts_per_tok": 2, "norm_topk_prob": True},
    # Qwen2 (`model_type` qwen2, the Qwen2.5-Coder family): the tiny sizes, biases on q/k/v
    # (random, nonzero: transformers initialises them to 0), untied lm_head, no q/k norms.
    "tiny-qwen2": {"model_type": "qwen2", "hidden_size": 64, "intermediate_size": 128,
                   "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                   "vocab_size": 1024},
    # GPU presets: the Qwen3-0.6B shape, and a small Qwen3-MoE of the Qwen3-30B-A3B kind
    # (64 experts, top 8, every layer sparse). Their vocabulary is 32,768 rows, not Qwen3's
    # 151,936: the BPE trained here on a few MB of text stops near 29k tokens (reserved tokens
    # fill the rest), and rows no token uses would only dilute the toy environment's reward.
    # They are saved in bf16, the dtype the servers run and the trainer publishes back (its
    # master weights stay fp32): half the bytes of every weight export and load.
    "qwen3-0.6b": {"hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
                   "num_attention_heads": 16, "num_key_value_heads": 8, "head_dim": 128,
                   "vocab_size": 32768, "save_dtype": "bfloat16"},
    "qwen3-moe-small": {"hidden_size": 1024, "intermediate_size": 3072,
                        "moe_intermediate_size": 256, "num_hidden_layers": 12,
                        "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 64,
                        "vocab_size": 32768, "num_experts": 64, "num_experts_per_tok": 8,
                        "norm_topk_prob": True, "save_dtype": "bfloat16"},
    # The Qwen3-30B-A3B shape (48 layers, 128 experts, top 8; ~30B parameters, 60 GB in bf16)
    # for the eight-GPU layout (configs/gpu_8x_moe.toml). Built directly in bf16 on a GPU when
    # one is there (an fp32 copy on the host would be 120 GB).
    "qwen3-30b-a3b": {"hidden_size": 2048, "intermediate_size": 6144,
                      "moe_intermediate_size": 768, "num_hidden_layers": 48,
                      "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
                      "vocab_size": 32768, "num_experts": 128, "num_experts_per_tok": 8,
                      "norm_topk_prob": True, "save_dtype": "bfloat16", "init_in_save_dtype": True},
}

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def _corpus(max_bytes: int = 3_000_000) -> list[str]:
    """Deterministic training text: sorted stdlib sources up to `max_bytes`."""
    stdlib = Path(sys.base_prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
    texts: list[str] = []
    total = 0
    for path in sorted(stdlib.glob("*.py")):
        text = path.read_text(encoding="utf-8", errors="replace")
        texts.append(text)
        total += len(text)
        if total >= max_bytes:
            break
    return texts


def train_tokenizer(out_dir: Path, vocab_size: int) -> None:
    """Train a byte-level BPE with the chat special tokens and save it in HF format."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    short = vocab_size - tok.get_vocab_size()
    if short > 0:  # BPE ran out of merges: reserved tokens fill the vocabulary, as in Qwen's
        tok.add_special_tokens([f"<|reserved_{i}|>" for i in range(short)])
    tok.save(str(out_dir / "tokenizer.json"))
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "model_max_length": 131072,
        "clean_up_tokenization_spaces": False,
    }
    (out_dir / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    special = {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}
    (out_dir / "special_tokens_map.json").write_text(json.dumps(special, indent=2))


def create_tiny_model(out_dir: str | Path, *, preset: str = "tiny", seed: int = 0) -> Path:
    """Create (or reuse) a random-init Qwen3 (or Qwen3-MoE, or Qwen2) checkpoint + tokenizer at
    `out_dir`."""
    out = Path(out_dir)
    marker = out / "swefleet_model.json"
    wanted = {"preset": preset, "seed": seed}
    if marker.exists() and json.loads(marker.read_text()) == wanted:
        return out
    import torch
    from tokenizers import Tokenizer
    from transformers import (
        Qwen2Config,
        Qwen2ForCausalLM,
        Qwen3Config,
        Qwen3ForCausalLM,
        Qwen3MoeConfig,
        Qwen3MoeForCausalLM,
    )

    shape = dict(PRESETS[preset])
    save_dtype = shape.pop("save_dtype", "float32")
    direct = shape.pop("init_in_save_dtype", False)
    qwen2 = shape.pop("model_type", "qwen3") == "qwen2"
    moe = "num_experts" in shape
    config_cls, model_cls = (Qwen3MoeConfig, Qwen3MoeForCausalLM) if moe else (
        Qwen3Config, Qwen3ForCausalLM)
    if qwen2:
        config_cls, model_cls = Qwen2Config, Qwen2ForCausalLM
    out.mkdir(parents=True, exist_ok=True)
    train_tokenizer(out, shape["vocab_size"])
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    config = config_cls(
        **shape,
        max_position_embeddings=131072,
        rope_theta=1_000_000.0,
        tie_word_embeddings=False,
        eos_token_id=tok.token_to_id("<|im_end|>"),
        pad_token_id=tok.token_to_id("<|endoftext|>"),
        bos_token_id=None,
        torch_dtype=save_dtype,
    )
    torch.manual_seed(seed)
    if direct:
        model = _init_direct(model_cls, config, getattr(torch, save_dtype))
    else:
        model = model_cls(config).to(getattr(torch, save_dtype))
    if qwen2:
        _random_qkv_biases(model)
    model.save_pretrained(out, safe_serialization=True)
    marker.write_text(json.dumps(wanted))
    return out


def _init_direct(model_cls, config, dtype):
    """Random-init in `dtype` itself, on the first GPU when there is one: for shapes whose fp32
    host copy would not fit (the values differ from an fp32 init cast down, same distribution)."""
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            return model_cls(config)
    finally:
        torch.set_default_dtype(previous)


def _random_qkv_biases(model, std: float = 0.5) -> None:
    """Qwen2's q/k/v biases drawn from N(0, std) (transformers initialises them to 0, so a
    mapping that dropped them would go unnoticed); drawn after the init, from the same seed."""
    import torch

    with torch.no_grad():
        for layer in model.model.layers:
            for proj in (layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj):
                proj.bias.normal_(0.0, std)
