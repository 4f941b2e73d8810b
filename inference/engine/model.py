"""Load an HF-format causal LM checkpoint (model, tokenizer, EOS ids) for the embedded engine."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoadedModel:
    model: Any
    """A transformers `*ForCausalLM` in eval mode."""
    tokenizer: Any | None
    """HF tokenizer, or None when the directory has no tokenizer files (token-id prompts only)."""
    eos_ids: frozenset[int]
    max_model_len: int
    name: str
    device: torch.device


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    if dtype == "auto":
        return torch.float32 if device.type == "cpu" else torch.bfloat16
    return _DTYPES[dtype]


def load_model(model_dir: str | Path, device: str = "cpu", dtype: str = "auto") -> LoadedModel:
    """Load weights with `AutoModelForCausalLM` onto `device`; SDPA attention, eval mode."""
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    path = Path(model_dir)
    dev = torch.device(device)
    if dev.type == "cuda":
        # cuDNN attention builds a graph per shape; the KV length grows every decode step, so it
        # rebuilt one per step (14 ms of a 16 ms step on an H200). Flash/efficient kernels don't.
        torch.backends.cuda.enable_cudnn_sdp(False)
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=resolve_dtype(dtype, dev), attn_implementation="sdpa"
    )
    model.to(dev).eval()
    tokenizer = _load_tokenizer(path)
    eos = _eos_ids(path, model.config, tokenizer)
    max_len = int(getattr(model.config, "max_position_embeddings", 0) or 1 << 20)
    log.info("loaded %s on %s (eos=%s, max_model_len=%d)", path, dev, sorted(eos), max_len)
    return LoadedModel(model, tokenizer, eos, max_len, path.name, dev)


def _load_tokenizer(path: Path) -> Any | None:
    if not any((path / name).exists() for name in ("tokenizer.json", "tokenizer_config.json")):
        return None
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def _as_set(value: Any) -> set[int]:
    if value is None:
        return set()
    if isinstance(value, int):
        return {value}
    return {int(v) for v in value}


def _eos_ids(path: Path, config: Any, tokenizer: Any | None) -> frozenset[int]:
    """EOS ids of generation_config.json, else config.json, plus the tokenizer's EOS token."""
    ids = _as_set(getattr(config, "eos_token_id", None))
    gen = path / "generation_config.json"
    if gen.exists():
        ids |= _as_set(json.loads(gen.read_text()).get("eos_token_id"))
    if tokenizer is not None and tokenizer.eos_token_id is not None:
        ids.add(int(tokenizer.eos_token_id))
    return frozenset(ids)
