"""A tiny Qwen2 GGUF written with gguf's own writer, and PyPI-style part wheels cut from a file:
what the `swefleet models` tests pull, convert, export and import (no download).

The model: 2 layers, hidden 64, 4 heads / 2 KV heads, FFN 256, q/k/v biases, a separate
`output.weight`; tensors in F32, F16, Q8_0 (quantized by gguf), Q4_K and Q6_K (random blocks
with small scales: gguf cannot quantize to those, it only reads them). The tokenizer: a
byte-level BPE of the 256 byte symbols, a few merges and the chat special tokens, with the
Qwen2 pre-tokenizer and a ChatML template.
"""

from __future__ import annotations

import hashlib
import zipfile
from pathlib import Path

import numpy as np

SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
WORDS = ("def", "return", "Ġsum", "Ġreturn", "Ġdef", "ĠĠĠ", "ĠĠĠĠ", "(x", "):", "Ġx", "Ċ",
         "ĊĠĠĠ", "user", "assistant", "system", "Ġthe", "Ġa", "Ġlist", "Write", "Ġfunction")
CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
SHAPE = {"layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn": 256, "context": 512}


def byte_symbols() -> list[str]:
    """GPT-2's byte -> printable character map, in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
            *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def vocabulary() -> tuple[list[str], list[str], list[int]]:
    """(tokens, merges, token types) of the tiny BPE."""
    tokens = byte_symbols()
    merges: list[str] = []
    for word in WORDS:
        left = word[0]
        for ch in word[1:]:
            if left + ch not in tokens:
                merges.append(f"{left} {ch}")
                tokens.append(left + ch)
            left += ch
    types = [1] * len(tokens) + [3] * len(SPECIALS)  # NORMAL, then CONTROL
    return tokens + list(SPECIALS), merges, types


def _k_blocks(rng, rows: int, cols: int, block_bytes: int, d_at: list[int]) -> np.ndarray:
    """Random K-quant blocks whose f16 scales (at byte offsets `d_at`) are small and finite."""
    blocks = rng.integers(0, 256, size=(rows, cols // 256, block_bytes), dtype=np.uint8)
    for offset in d_at:
        blocks[:, :, offset:offset + 2] = np.frombuffer(np.float16(0.002).tobytes(), np.uint8)
    return blocks.reshape(rows, -1)


def tensors(seed: int = 0) -> list[tuple[str, np.ndarray, str]]:
    """(GGUF name, data in numpy order, GGUF type) of every tensor."""
    rng = np.random.default_rng(seed)
    h, ffn, n_vocab = SHAPE["hidden"], SHAPE["ffn"], len(vocabulary()[0])
    kv = h // SHAPE["heads"] * SHAPE["kv_heads"]

    def mat(out: int, inp: int) -> np.ndarray:
        return (rng.standard_normal((out, inp)) / inp**0.5).astype(np.float32)

    def vec(n: int, base: float = 0.0) -> np.ndarray:
        return (base + 0.1 * rng.standard_normal(n)).astype(np.float32)

    found = [("token_embd.weight", mat(n_vocab, h), "F16"),
             ("output_norm.weight", vec(h, 1.0), "F32"), ("output.weight", mat(n_vocab, h), "Q8_0")]
    for i in range(SHAPE["layers"]):
        b = f"blk.{i}"
        found += [(f"{b}.attn_norm.weight", vec(h, 1.0), "F32"),
                  (f"{b}.attn_q.weight", mat(h, h), "Q8_0"), (f"{b}.attn_q.bias", vec(h), "F32"),
                  (f"{b}.attn_k.weight", mat(kv, h), "F16"), (f"{b}.attn_k.bias", vec(kv), "F32"),
                  (f"{b}.attn_v.weight", mat(kv, h), "Q8_0"), (f"{b}.attn_v.bias", vec(kv), "F32"),
                  (f"{b}.attn_output.weight", mat(h, h), "F32"),
                  (f"{b}.ffn_norm.weight", vec(h, 1.0), "F32"),
                  (f"{b}.ffn_gate.weight", mat(ffn, h), "Q8_0"),
                  (f"{b}.ffn_up.weight", mat(ffn, h), "F16")]
        if i % 2 == 0:  # Q4_K: d, dmin, scales[12], qs[128]
            down = _k_blocks(rng, h, ffn, 144, [0, 2])
            found.append((f"{b}.ffn_down.weight", down, "Q4_K"))
        else:  # Q6_K: ql[128], qh[64], scales[16], d
            found.append((f"{b}.ffn_down.weight", _k_blocks(rng, h, ffn, 210, [208]), "Q6_K"))
    return found


def write_tiny_gguf(path: Path, seed: int = 0) -> Path:
    import gguf
    from gguf.quants import quantize

    kinds = gguf.GGMLQuantizationType
    tokens, merges, types = vocabulary()
    w = gguf.GGUFWriter(str(path), "qwen2")
    w.add_name("tiny-qwen2")
    w.add_block_count(SHAPE["layers"])
    w.add_context_length(SHAPE["context"])
    w.add_embedding_length(SHAPE["hidden"])
    w.add_feed_forward_length(SHAPE["ffn"])
    w.add_head_count(SHAPE["heads"])
    w.add_head_count_kv(SHAPE["kv_heads"])
    w.add_rope_freq_base(1_000_000.0)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("qwen2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges(merges)
    w.add_bos_token_id(tokens.index("<|endoftext|>"))
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    w.add_pad_token_id(tokens.index("<|endoftext|>"))
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT_TEMPLATE)
    for name, data, kind in tensors(seed):
        if kind == "F32":
            w.add_tensor(name, data)
        elif kind == "F16":
            w.add_tensor(name, data.astype(np.float16))
        elif kind == "Q8_0":
            w.add_tensor(name, quantize(data, kinds.Q8_0), raw_dtype=kinds.Q8_0)
        else:
            w.add_tensor(name, data, raw_dtype=kinds[kind])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def part_wheels(gguf_file: Path, out: Path, prefix: str, version: str, parts: int) -> list[Path]:
    """`gguf_file` cut into `parts` wheels `<prefix><i>-<version>`, each holding
    `<package>/data/partNN.bin`, as the published models are."""
    data = gguf_file.read_bytes()
    size = -(-len(data) // parts)
    out.mkdir(parents=True, exist_ok=True)
    wheels = []
    for i in range(1, parts + 1):
        dist = f"{prefix}{i}".replace("-", "_")
        files = {f"{dist}/__init__.py": b"",
                 f"{dist}/data/part{i:02d}.bin": data[(i - 1) * size:i * size],
                 f"{dist}-{version}.dist-info/METADATA":
                     f"Metadata-Version: 2.1\nName: {prefix}{i}\nVersion: {version}\n".encode(),
                 f"{dist}-{version}.dist-info/WHEEL":
                     b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\n"
                     b"Tag: py3-none-any\n"}
        record = "".join(f"{n},sha256={_b64(hashlib.sha256(b).digest())},{len(b)}\n"
                         for n, b in files.items())
        files[f"{dist}-{version}.dist-info/RECORD"] = (
            record + f"{dist}-{version}.dist-info/RECORD,,\n").encode()
        wheel = out / f"{dist}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(wheel, "w") as zf:
            for name, body in files.items():
                zf.writestr(name, body)
        wheels.append(wheel)
    return wheels


def _b64(digest: bytes) -> str:
    import base64

    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()
