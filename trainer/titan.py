"""The one module that touches torchtitan (0.2.2: `TrainSpec`, `Qwen3ModelArgs`,
`Qwen3StateDictAdapter`, `VarlenMetadata`). A move to torchtitan >= 0.3 (`ModelSpec`,
`Configurable`) rewrites this file only; the rest of `trainer/` sees:

- `load_policy(ckpt_dir, device, attention) -> Policy` (model + HF mapping + source dtype),
- `hidden_states(model, tokens, positions, cu_seqlens)` (final-norm hidden states, no lm_head),
- `output_weight(model)` (the lm_head weight, for the chunked log-prob),
- `hf_state_dict(policy)` (HF-named tensors of the current weights).

Models: Qwen3 dense (`model_type == "qwen3"`). Model args come from the checkpoint's
config.json; weights from its safetensors via `Qwen3StateDictAdapter.from_hf`.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

TRAIN_SPEC = "qwen3"


@dataclass
class Policy:
    """A torchtitan model loaded from an HF checkpoint, plus what is needed to export it."""

    model: nn.Module
    adapter: Any
    """The torchtitan state-dict adapter (HF <-> torchtitan names)."""
    hf_config: dict
    source_dir: Path
    source_dtype: torch.dtype
    """dtype of the checkpoint's tensors; exports use it too."""
    attention: str
    """`sdpa` (samples as padded causal rows) or `varlen` (packed, boundaries from cu_seqlens)."""


def _rope_theta(hf: dict) -> float:
    params = hf.get("rope_parameters") or {}
    scaling = hf.get("rope_scaling")
    rope_type = params.get("rope_type", (scaling or {}).get("rope_type", "default"))
    if rope_type != "default":
        raise NotImplementedError(f"rope type {rope_type!r} is not supported yet")
    return float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))


def model_args_from_hf(hf: dict, attention: str) -> Any:
    """torchtitan Qwen3ModelArgs for an HF Qwen3 config.json (dense only for now)."""
    from torchtitan.protocols.train_spec import get_train_spec

    if hf.get("model_type") != "qwen3":
        raise NotImplementedError(f"model_type {hf.get('model_type')!r}: only dense qwen3 for now")
    if hf.get("attention_bias") or hf.get("use_sliding_window"):
        raise NotImplementedError("attention_bias / sliding window are not supported")
    if hf.get("hidden_act", "silu") != "silu":
        raise NotImplementedError(f"hidden_act {hf['hidden_act']!r}")
    args = copy.deepcopy(get_train_spec(TRAIN_SPEC).model_args["debugmodel"])
    args.dim = hf["hidden_size"]
    args.n_layers = hf["num_hidden_layers"]
    args.n_heads = hf["num_attention_heads"]
    args.n_kv_heads = hf.get("num_key_value_heads") or hf["num_attention_heads"]
    args.head_dim = hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"]
    args.hidden_dim = hf["intermediate_size"]
    args.vocab_size = hf["vocab_size"]
    args.norm_eps = hf.get("rms_norm_eps", 1e-6)
    args.rope_theta = _rope_theta(hf)
    args.qk_norm = True
    args.max_seq_len = hf.get("max_position_embeddings", 40960)
    args.enable_weight_tying = bool(hf.get("tie_word_embeddings", False))
    eos = hf.get("eos_token_id")
    args.eos_id = eos[0] if isinstance(eos, list) else (eos if eos is not None else -1)
    args.moe_enabled = False
    args.attn_type = attention
    # cu_seqlens-based masks are built here, never torchtitan's EOS-based document masks.
    args.attn_mask_type = "block_causal" if attention == "varlen" else "causal"
    return args


def load_hf_tensors(ckpt_dir: Path) -> dict[str, torch.Tensor]:
    """All tensors of an HF checkpoint directory (single file or sharded safetensors)."""
    from safetensors.torch import load_file

    files = sorted(Path(ckpt_dir).glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {ckpt_dir}")
    tensors: dict[str, torch.Tensor] = {}
    for f in files:
        tensors.update(load_file(str(f)))
    return tensors


def load_policy(ckpt_dir: str | Path, device: torch.device, attention: str) -> Policy:
    """Build the torchtitan Qwen3 on `meta`, materialise it on `device` in fp32 and load the
    HF weights (strict: every parameter must come from the checkpoint)."""
    from torchtitan.protocols.train_spec import get_train_spec

    ckpt_dir = Path(ckpt_dir)
    hf = json.loads((ckpt_dir / "config.json").read_text())
    args = model_args_from_hf(hf, attention)
    spec = get_train_spec(TRAIN_SPEC)
    with torch.device("meta"):
        model = spec.model_cls(args)
    model.to_empty(device=device)
    with torch.device(device):  # the only non-persistent buffer of dense Qwen3 (no random init)
        model.rope_cache = model._precompute_rope_cache()
    if args.enable_weight_tying:
        model.output.weight = model.tok_embeddings.weight
    adapter = spec.state_dict_adapter(args, None)
    hf_tensors = load_hf_tensors(ckpt_dir)
    source_dtype = hf_tensors["model.embed_tokens.weight"].dtype
    state = adapter.from_hf({k: v for k, v in hf_tensors.items() if "rotary_emb" not in k})
    model.load_state_dict(state, strict=True)
    return Policy(model, adapter, hf, ckpt_dir, source_dtype, attention)


def hf_state_dict(policy: Policy) -> dict[str, torch.Tensor]:
    """The current weights under HF names (full tensors, on the model's device)."""
    state = {k: v.detach() for k, v in policy.model.state_dict().items()}
    return policy.adapter.to_hf(state)


def output_weight(model: nn.Module) -> torch.Tensor:
    """The lm_head weight [vocab, dim]."""
    return model.output.weight


def varlen_metadata(cu_seqlens: torch.Tensor, max_len: int) -> Any:
    """torchtitan's varlen attention metadata built from sample boundaries (not from EOS)."""
    from torchtitan.models.attention import VarlenMetadata

    cu = cu_seqlens.to(torch.int32)
    return VarlenMetadata(cu_seq_q=cu, cu_seq_k=cu, max_q=max_len, max_k=max_len)


def hidden_states(
    model: nn.Module,
    tokens: torch.Tensor,
    positions: torch.Tensor | None = None,
    attention_masks: Any = None,
) -> torch.Tensor:
    """The model's forward up to (and including) the final norm: [B, L, dim]. Mirrors
    `Qwen3Model.forward` without `output`, so the lm_head can be applied in chunks."""
    h = model.tok_embeddings(tokens)
    for layer in model.layers.values():
        h = layer(h, model.rope_cache, attention_masks, positions)
    return model.norm(h)
