"""Training FLOPs of a dense Qwen3 step, for MFU. No torch import.

`step_flops` (the number the trainer and benchmarks/trainer.py report as MFU) counts the matmul
work a training step really has to do (forward + backward = 3 x forward):

    6 * N * T  +  sum over samples of  6 * L * H * d * S**2

- N: parameters that take part in a matmul per token: every linear of every layer
  (q, k, v, o, gate, up, down) plus the lm_head (vocab x dim), counted once even when it is tied
  to the embedding (the embedding lookup is no matmul; norms are negligible).
- T: tokens in the step; S: length of each sample (attention never crosses samples).
- Attention: per layer and sample, QK^T and PV are 2 * 2 * S^2 * H * d forward FLOPs for full
  attention; causal attention does half of that (flash kernels skip the masked blocks), x3 for
  training: 6 * S^2 * H * d.

`titan_step_flops` is torchtitan's convention (what the H200 anchors in
shared/notes/TRAINER.md use): 6 * (parameters - embedding) * T + 12 * L * H * d * S * T, i.e.
non-causal attention and no lm_head when the weights are tied. For Qwen3-1.7B at S = 8192 it
is 7 % larger than `step_flops`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

#: bf16 dense peak FLOP/s (vendor datasheets; torchtitan uses the same numbers)
PEAK_BF16_FLOPS = {"H100": 989e12, "H200": 989e12, "H800": 989e12, "A100": 312e12, "B200": 2.25e15}


def _shape(hf: dict) -> tuple[int, int, int, int, int, int, int]:
    dim, layers = hf["hidden_size"], hf["num_hidden_layers"]
    heads = hf["num_attention_heads"]
    kv = hf.get("num_key_value_heads") or heads
    head_dim = hf.get("head_dim") or dim // heads
    return dim, layers, heads, kv, head_dim, hf["intermediate_size"], hf["vocab_size"]


def layer_matmul_params(hf: dict) -> int:
    dim, _, heads, kv, hd, inter, _ = _shape(hf)
    return dim * heads * hd * 2 + dim * kv * hd * 2 + 3 * dim * inter


def matmul_params(hf: dict) -> int:
    """N of `step_flops`: all layers' linears + the lm_head."""
    dim, layers, *_, vocab = _shape(hf)
    return layers * layer_matmul_params(hf) + vocab * dim


def step_flops(hf: dict, sample_lengths: Sequence[int]) -> float:
    """Model FLOPs of one training step over samples of these lengths (causal attention)."""
    _, layers, heads, _, hd, _, _ = _shape(hf)
    tokens = sum(sample_lengths)
    attention = sum(6 * layers * heads * hd * s * s for s in sample_lengths)
    return 6.0 * matmul_params(hf) * tokens + attention


def titan_step_flops(hf: dict, sample_lengths: Sequence[int], row_length: int) -> float:
    """torchtitan's `get_nparams_and_flops` convention for the same step (rows of
    `row_length` tokens; non-embedding parameters incl. norms; tied lm_head not counted)."""
    dim, layers, heads, _, hd, _, vocab = _shape(hf)
    norms = layers * (2 * dim + 2 * hd) + dim
    lm_head = 0 if hf.get("tie_word_embeddings", False) else vocab * dim
    params = layers * layer_matmul_params(hf) + norms + lm_head
    tokens = sum(sample_lengths)
    return (6.0 * params + 12.0 * layers * heads * hd * row_length) * tokens


def peak_flops(device_name: str) -> float | None:
    """bf16 dense peak of a GPU by its name (None when unknown, e.g. CPU)."""
    for key, value in PEAK_BF16_FLOPS.items():
        if key in device_name:
            return value
    return None


def step_mfu(hf: dict, cu_seqlens: Sequence[int], step_s: float, device_name: str,
             world: int = 1) -> float | None:
    """Model FLOPs utilisation of one training step on `world` GPUs of this kind: `step_flops`
    of the batch's samples / step time / peak. None on CPU, unknown GPUs and MoE models (their
    active-parameter count needs a different formula)."""
    peak = peak_flops(device_name)
    if peak is None or step_s <= 0 or hf.get("num_experts") or hf.get("n_routed_experts"):
        return None
    lengths = [int(b) - int(a) for a, b in itertools.pairwise(cu_seqlens)]
    return step_flops(hf, lengths) / step_s / (peak * world)
