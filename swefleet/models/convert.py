"""A verified GGUF -> a Hugging Face folder: bf16 safetensors, config.json,
generation_config.json, tokenizer files and chat_template.jinja."""

from __future__ import annotations

from pathlib import Path

from swefleet.models import hf_files
from swefleet.models.progress import Steps
from swefleet.models.weights import LAYER_NAMES, hf_name, write_weights


def expected_names(cfg: dict) -> set[str]:
    """The parameter names of a Hugging Face Qwen2ForCausalLM of `cfg`."""
    names = {"model.embed_tokens.weight", "model.norm.weight"}
    names |= set() if cfg["tie_word_embeddings"] else {"lm_head.weight"}
    for i in range(cfg["num_hidden_layers"]):
        for part in LAYER_NAMES:
            names.add(hf_name(f"blk.{i}.{part}.weight"))
        names |= {hf_name(f"blk.{i}.attn_{p}.bias") for p in "qkv"}
    return names


def gguf_to_hf(gguf_file: Path, out: Path, steps: Steps) -> dict:
    """Convert `gguf_file` into the new folder `out`; its config (as written)."""
    from gguf import GGUFReader

    with steps.step("read GGUF header", total=1, unit="files") as advance:
        reader = GGUFReader(str(gguf_file))  # parses all metadata: the 151k-token vocabulary too
        cfg = hf_files.config(reader)  # an unsupported model is refused before any work
        advance(1)
    out.mkdir(parents=True)
    with steps.step("convert weights (bf16)", total=len(reader.tensors), unit="tensors") as advance:
        names = set(write_weights(reader, out, advance))
    if names != (want := expected_names(cfg)):
        raise ValueError(f"the GGUF's tensors are not a whole Qwen2: missing "
                         f"{sorted(want - names)[:3]}, unexpected {sorted(names - want)[:3]}")
    hf_files.write_json(out / "config.json", cfg)
    tokens = hf_files.field(reader, "tokenizer.ggml.tokens")
    hf_files.write_json(out / "generation_config.json", hf_files.generation_config(reader, tokens))
    with steps.step("convert tokenizer", total=1, unit="files") as advance:
        hf_files.write_tokenizer(gguf_file, reader, out)
        advance(1)
    return cfg
