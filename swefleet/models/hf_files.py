"""The Hugging Face files besides the weights, from the GGUF header: `config.json`,
`generation_config.json`, the tokenizer (transformers' own GGUF tokenizer conversion),
`tokenizer_config.json` and `chat_template.jinja`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

ARCHITECTURES = {"qwen2": "Qwen2ForCausalLM"}
_MISSING = object()


def field(reader, key: str, default: Any = _MISSING) -> Any:
    """The value of GGUF metadata `key`; ValueError when it is missing and has no default."""
    found = reader.fields.get(key)
    if found is None:
        if default is _MISSING:
            raise ValueError(f"the GGUF has no {key}: refused")
        return default
    return found.contents()


def _f32(value: float) -> float:
    """A float32 header value as the decimal it was written from (1e-06, not 9.99e-07)."""
    return float(f"{value:.7g}")


def config(reader) -> dict:
    """`config.json` of the model the GGUF holds (a Qwen2 decoder, bf16), in the form Qwen's own
    releases use (`rope_theta`, `torch_dtype`), which every transformers and vLLM reads."""
    arch = field(reader, "general.architecture")
    if arch not in ARCHITECTURES:
        raise ValueError(f"the GGUF holds a {arch!r} model; supported: "
                         f"{', '.join(ARCHITECTURES)}: refused")
    names = {t.name: t for t in reader.tensors}
    layers = int(field(reader, f"{arch}.block_count"))
    heads = int(field(reader, f"{arch}.attention.head_count"))
    return {
        "architectures": [ARCHITECTURES[arch]],
        "model_type": arch,
        "vocab_size": int(names["token_embd.weight"].shape[1]),
        "hidden_size": int(field(reader, f"{arch}.embedding_length")),
        "intermediate_size": int(field(reader, f"{arch}.feed_forward_length")),
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": int(field(reader, f"{arch}.attention.head_count_kv", heads)),
        "hidden_act": "silu",
        "max_position_embeddings": int(field(reader, f"{arch}.context_length")),
        "initializer_range": 0.02,
        "rms_norm_eps": _f32(field(reader, f"{arch}.attention.layer_norm_rms_epsilon")),
        "rope_theta": _f32(field(reader, f"{arch}.rope.freq_base", 10000.0)),
        "rope_scaling": None,
        "use_sliding_window": False,
        "sliding_window": None,
        "max_window_layers": layers,
        "attention_dropout": 0.0,
        "tie_word_embeddings": "output.weight" not in names,
        "use_cache": True,
        "bos_token_id": field(reader, "tokenizer.ggml.bos_token_id", None),
        "eos_token_id": field(reader, "tokenizer.ggml.eos_token_id", None),
        "pad_token_id": field(reader, "tokenizer.ggml.padding_token_id", None),
        "torch_dtype": "bfloat16",
    }


def generation_config(reader, tokens: list[str]) -> dict:
    """Greedy by default; stops at eos and at `<|endoftext|>`."""
    eos = field(reader, "tokenizer.ggml.eos_token_id", None)
    stops = [i for i in (eos, _index(tokens, "<|endoftext|>")) if i is not None]
    return {"bos_token_id": field(reader, "tokenizer.ggml.bos_token_id", None),
            "eos_token_id": list(dict.fromkeys(stops)),
            "pad_token_id": field(reader, "tokenizer.ggml.padding_token_id", None)}


def write_tokenizer(gguf_file: Path, reader, out: Path) -> None:
    """tokenizer.json and tokenizer_config.json (eos from the GGUF: `<|im_end|>` for the
    catalogue's chat models, no BOS added) and chat_template.jinja."""
    from transformers import AutoTokenizer

    # the tokenizer class named: transformers then reads only the tokenizer's metadata (given no
    # type, it parses the whole header again, for the model's config: 30 s more on 2 cores)
    tok = AutoTokenizer.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name,
                                        tokenizer_type=field(reader, "general.architecture"))
    tok.save_pretrained(str(out))
    tokens = field(reader, "tokenizer.ggml.tokens")
    path = out / "tokenizer_config.json"
    conf = {k: v for k, v in json.loads(path.read_text()).items()
            if k not in ("is_local", "local_files_only")}
    for name, key in (("eos_token", "eos"), ("pad_token", "padding"), ("bos_token", "bos")):
        token_id = field(reader, f"tokenizer.ggml.{key}_token_id", None)
        conf[name] = tokens[token_id] if token_id is not None else None
    conf["model_max_length"] = int(field(reader, f"{field(reader, 'general.architecture')}"
                                                 ".context_length"))
    path.write_text(json.dumps(conf, indent=2, ensure_ascii=False) + "\n")
    template = field(reader, "tokenizer.chat_template", None)
    if template:
        (out / "chat_template.jinja").write_text(template)


def write_json(path: Path, data: dict) -> None:
    path.write_text(json.dumps(data, indent=2) + "\n")


def _index(tokens: list[str], token: str) -> int | None:
    try:
        return tokens.index(token)
    except ValueError:
        return None
