"""GGUF tensors -> bf16 safetensors under Hugging Face Qwen2 names, one tensor at a time.

Each tensor is dequantized with gguf's own `gguf.quants.dequantize` (a block of rows at a
time), cast to bf16 and collected into files of at most `shard_bytes`; a file is written as soon
as its tensors are in, so memory holds one file's tensors at most. GGUF lists a tensor's
dimensions innermost first: a Linear's `[in, out]` there is `[out, in]` here.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path

#: `blk.N.<part>` -> `model.layers.N.<module>`
LAYER_NAMES = {
    "attn_norm": "input_layernorm", "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}  # fmt: skip
TOP_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}
SHARD_BYTES = 1024 * 2**20
ROWS = 4096  # rows dequantized at a time: bounds the float32 copy of the largest matrix
INDEX_FILE = "model.safetensors.index.json"


def hf_name(name: str) -> str:
    """The Hugging Face Qwen2 parameter name of GGUF tensor `name`."""
    if m := re.fullmatch(r"blk\.(\d+)\.(\w+)\.(weight|bias)", name):
        if m[2] in LAYER_NAMES:
            return f"model.layers.{m[1]}.{LAYER_NAMES[m[2]]}.{m[3]}"
    elif (m := re.fullmatch(r"(\w+)\.(weight|bias)", name)) and m[1] in TOP_NAMES:
        return f"{TOP_NAMES[m[1]]}.{m[2]}"
    raise ValueError(f"GGUF tensor {name} has no Qwen2 counterpart: refused")


def hf_shape(tensor) -> tuple[int, ...]:
    return tuple(int(d) for d in reversed(tensor.shape.tolist()))


def dequantized(tensor):
    """A GGUF reader tensor as a bf16 torch tensor of its Hugging Face shape."""
    import numpy as np
    import torch
    from gguf.quants import dequantize

    shape = hf_shape(tensor)
    out = torch.empty(shape, dtype=torch.bfloat16)
    rows = out.view(-1, shape[-1]) if len(shape) > 1 else out.view(1, -1)
    data = tensor.data.reshape(rows.shape[0], -1) if len(shape) > 1 else tensor.data.reshape(1, -1)
    for start in range(0, rows.shape[0], ROWS):
        block = dequantize(data[start:start + ROWS], tensor.tensor_type)
        block = torch.from_numpy(np.require(block, np.float32, ["C", "W"]))  # F32: a copy
        rows[start:start + ROWS] = block.view(-1, shape[-1]).to(torch.bfloat16)
    return out


def write_weights(reader, out: Path, advance: Callable[[float], None],
                  shard_bytes: int = SHARD_BYTES) -> list[str]:
    """Every tensor of `reader` (a `gguf.GGUFReader`) into `out` as bf16 safetensors (one file,
    or shards + `model.safetensors.index.json`); the Hugging Face names written."""
    from safetensors.torch import save_file

    tensors = list(reader.tensors)
    names = [hf_name(t.name) for t in tensors]
    if len(set(names)) != len(names):
        raise ValueError("the GGUF lists a tensor twice: refused")
    shards = _plan(tensors, shard_bytes)
    files = (["model.safetensors"] if len(shards) == 1 else
             [f"model-{i:05d}-of-{len(shards):05d}.safetensors" for i in range(1, len(shards) + 1)])
    weight_map: dict[str, str] = {}
    for group, file in zip(shards, files):
        pending = {}
        for tensor in group:
            pending[hf_name(tensor.name)] = dequantized(tensor)
            weight_map[hf_name(tensor.name)] = file
            advance(1)
        save_file(pending, str(out / file), {"format": "pt"})
        os.chmod(out / file, 0o666 & ~_umask())  # safetensors writes 0600
    if len(files) > 1:
        total = sum(2 * int(t.n_elements) for t in tensors)
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        (out / INDEX_FILE).write_text(json.dumps(index, indent=2) + "\n")
    return names


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _plan(tensors: list, shard_bytes: int) -> list[list]:
    """Tensors in file order, grouped into files of at most `shard_bytes` of bf16 (a larger
    tensor alone in its file)."""
    shards: list[list] = [[]]
    used = 0
    for tensor in tensors:
        size = 2 * int(tensor.n_elements)
        if shards[-1] and used + size > shard_bytes:
            shards.append([])
            used = 0
        shards[-1].append(tensor)
        used += size
    return shards
