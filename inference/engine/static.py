"""Static KV cache with slots, batched prefill and a one-token decode forward (no HF cache object).

For dense Llama-family decoders (`qwen3`, `qwen2`, `llama`: RMSNorm, RoPE, GQA, SwiGLU, optional
q/k head norms, full attention). The forward reuses the model's own weights (projections, norms,
MLP, embeddings, lm_head), so it computes what transformers computes (up to rounding); the cache,
the attention call and a leaner op sequence are ours (fewer kernels per decode step: q/k/v and
gate/up as one GEMM each via `fused.py`, torch's fused RMSNorm on CUDA, RoPE in three ops):

- the cache is one [slots, kv_heads, capacity, head_dim] tensor per layer for keys and one for
  values, allocated once; a sequence owns one slot (row) from prefill to its end;
- prefill runs several prompts at once, right-padded (causal attention never looks at the pads;
  their K/V land past each prompt's end and are overwritten by the decode steps); a prompt may
  continue a prefix already cached in its slot (`prefix.py`) and then only its rest is computed;
- decode writes the new token's K/V at each row's own position and attends over the first `width`
  cache columns with a per-row mask, so every shape depends only on (batch bucket, width bucket):
  that is what lets `graphs.py` capture a CUDA graph per bucket pair.

Nothing in `decode` synchronises with the host: positions and lengths are tracked on the host by
the caller and passed in as device tensors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from swefleet.inference.engine.fused import FusedLinear, can_fuse

SUPPORTED_MODEL_TYPES = frozenset({"qwen3", "qwen2", "llama"})


def unsupported_reason(model: Any) -> str | None:
    """Why `model` cannot use the static path (None: it can)."""
    cfg = model.config
    if getattr(cfg, "model_type", None) not in SUPPORTED_MODEL_TYPES:
        return f"model_type {getattr(cfg, 'model_type', None)!r} not in {sorted(SUPPORTED_MODEL_TYPES)}"
    if getattr(cfg, "use_sliding_window", False):
        return "sliding-window attention"
    if any(t != "full_attention" for t in (getattr(cfg, "layer_types", None) or [])):
        return "non-full attention layers"
    rotary = getattr(model.model, "rotary_emb", None)
    if rotary is None or getattr(rotary, "rope_type", "default") not in (
        "default",
        "linear",
        "llama3",
    ):
        return f"rope type {getattr(rotary, 'rope_type', None)!r} (position-dependent scaling)"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"hidden_act {cfg.hidden_act!r}"
    return None


def _fuse(layer: Any) -> tuple[FusedLinear | None, FusedLinear | None]:
    """One GEMM for q/k/v and one for gate/up where the projections allow it."""
    attn, mlp = layer.self_attn, layer.mlp
    qkv = [getattr(attn, n, None) for n in ("q_proj", "k_proj", "v_proj")]
    gate_up = [getattr(mlp, n, None) for n in ("gate_proj", "up_proj")]
    return (
        FusedLinear(qkv) if can_fuse(qkv) else None,
        FusedLinear(gate_up) if can_fuse(gate_up) and hasattr(mlp, "down_proj") else None,
    )


@dataclass(frozen=True)
class Shape:
    layers: int
    heads: int
    kv_heads: int
    head_dim: int

    @property
    def group(self) -> int:
        return self.heads // self.kv_heads


def model_shape(model: Any) -> Shape:
    cfg = model.config
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return Shape(cfg.num_hidden_layers, cfg.num_attention_heads, cfg.num_key_value_heads, head_dim)


def bytes_per_token(model: Any) -> int:
    """Cache bytes one token of one slot takes (keys + values, all layers)."""
    s, dtype = model_shape(model), next(model.parameters()).dtype
    return 2 * s.layers * s.kv_heads * s.head_dim * torch.empty((), dtype=dtype).element_size()


def width_bucket(n: int, capacity: int) -> int:
    """Attention width for `n` cached positions: a multiple of 256 up to 4096, then a power of
    two; never more than `capacity`."""
    if n <= 4096:
        w = 256 * math.ceil(n / 256)
    else:
        w = 1 << math.ceil(math.log2(n))
    return min(max(w, 1), capacity)


class StaticCache:
    """The cache tensors and the forward passes that read and write them."""

    def __init__(self, model: Any, slots: int, capacity: int) -> None:
        self.model = model
        self.shape = s = model_shape(model)
        self.slots = slots
        self.capacity = capacity
        p = next(model.parameters())
        self.device, self.dtype = p.device, p.dtype
        size = (slots, s.kv_heads, capacity, s.head_dim)
        self.keys = [torch.zeros(size, dtype=p.dtype, device=p.device) for _ in range(s.layers)]
        self.values = [torch.zeros(size, dtype=p.dtype, device=p.device) for _ in range(s.layers)]
        rotary = model.model.rotary_emb
        self.inv_freq = rotary.inv_freq.to(device=p.device, dtype=torch.float32)
        self.rope_scale = float(getattr(rotary, "attention_scaling", 1.0))
        attn = model.model.layers[0].self_attn
        self.scaling = float(getattr(attn, "scaling", s.head_dim**-0.5))
        self.layers = list(model.model.layers)
        self.fused = [_fuse(layer) for layer in self.layers]

    def refresh(self) -> None:
        """After a weight update: re-attach fused projections whose weights were replaced."""
        for group in self.fused:
            for fused in group:
                if fused is not None:
                    fused.refresh()

    # ---- shared pieces ----

    def _rope(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """cos and signed sin of shape [*positions.shape, head_dim] in the model dtype (cos, sin
        as transformers computes them; the sin's first half negated for `_rotate`)."""
        freqs = positions[..., None].float() * self.inv_freq
        cos = (torch.cat((freqs, freqs), dim=-1).cos() * self.rope_scale).to(self.dtype)
        sin = (torch.cat((-freqs, freqs), dim=-1).sin() * self.rope_scale).to(self.dtype)
        return cos, sin

    @staticmethod
    def _rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
        """transformers' `x * cos + rotate_half(x) * sin` in three kernels: rotate_half(x) is
        roll(x, half) with the first half negated, the sign folded into `signed_sin`."""
        return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, dims=-1), signed_sin)

    def _norm(self, module: Any, x: torch.Tensor) -> torch.Tensor:
        """The model's RMSNorm; on CUDA as torch's fused kernel (transformers' takes ~8 kernels;
        on CPU torch's `rms_norm` is made of the same ops, so the module runs)."""
        eps = getattr(module, "variance_epsilon", None)
        if eps is None or self.device.type != "cuda":
            return module(x)
        return F.rms_norm(x, module.weight.shape, module.weight, eps)

    def _qkv(
        self, i: int, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Layer i: q [B, H, S, D], k and v [B, KV, S, D] with head norms and RoPE applied."""
        b, n, _ = x.shape
        s, attn, qkv = self.shape, self.layers[i].self_attn, self.fused[i][0]
        q, k, v = qkv(x) if qkv else (attn.q_proj(x), attn.k_proj(x), attn.v_proj(x))
        q = q.reshape(b, n, s.heads, s.head_dim)
        k = k.reshape(b, n, s.kv_heads, s.head_dim)
        v = v.reshape(b, n, s.kv_heads, s.head_dim)
        if getattr(attn, "q_norm", None) is not None:
            q, k = self._norm(attn.q_norm, q), self._norm(attn.k_norm, k)
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        return self._rotate(q, cos, sin), self._rotate(k, cos, sin), v

    def _layer_tail(self, i: int, h: torch.Tensor, attn_out: torch.Tensor) -> torch.Tensor:
        layer, gate_up = self.layers[i], self.fused[i][1]
        h = h + layer.self_attn.o_proj(attn_out)
        x = self._norm(layer.post_attention_layernorm, h)
        if gate_up is None:
            return h + layer.mlp(x)
        gate, up = gate_up(x)
        return h + layer.mlp.down_proj(F.silu(gate) * up)

    def _logits(self, h: torch.Tensor) -> torch.Tensor:
        return self.model.lm_head(self._norm(self.model.model.norm, h)).float()

    # ---- prefill ----

    def prefill(
        self, prompts: list[list[int]], slots: list[int], starts: list[int] | None = None
    ) -> torch.Tensor:
        """Write the prompts' K/V into `slots`; float32 logits [n, vocab] of each last token.
        `starts[i]`: prompt i continues a prefix of that many tokens already cached in its slot
        (its tokens go to positions starts[i]...; default: all 0)."""
        if starts and any(starts):
            return self._prefill_after(prompts, slots, starts)
        s = self.shape
        n, width = len(prompts), max(len(p) for p in prompts)
        ids = torch.zeros(n, width, dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, : len(p)] = torch.tensor(p, dtype=torch.long)
        ids = ids.to(self.device, non_blocking=True)
        rows = torch.tensor(slots, dtype=torch.long, device=self.device)
        last = torch.tensor([len(p) - 1 for p in prompts], dtype=torch.long, device=self.device)
        cos, sin = self._rope(torch.arange(width, device=self.device).unsqueeze(0))
        h = self.model.model.embed_tokens(ids)
        for i, layer in enumerate(self.model.model.layers):
            q, k, v = self._qkv(i, self._norm(layer.input_layernorm, h), cos, sin)
            self.keys[i][rows, :, :width] = k
            self.values[i][rows, :, :width] = v
            if s.group > 1:
                k, v = k.repeat_interleave(s.group, 1), v.repeat_interleave(s.group, 1)
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scaling)
            h = self._layer_tail(i, h, o.transpose(1, 2).reshape(n, width, -1))
        h = h[torch.arange(n, device=self.device), last]
        return self._logits(h)

    def _prefill_after(
        self, prompts: list[list[int]], slots: list[int], starts: list[int]
    ) -> torch.Tensor:
        """Prefill continuing cached prefixes: each prompt's queries attend over its slot's
        cached columns [0, start) and causally over its own tokens. Only real tokens' K/V are
        written (a padded row's pads could reach past the cache's end)."""
        s, dev = self.shape, self.device
        n, width = len(prompts), max(len(p) for p in prompts)
        ids = torch.zeros(n, width, dtype=torch.long)
        for i, p in enumerate(prompts):
            ids[i, : len(p)] = torch.tensor(p, dtype=torch.long)
        ids = ids.to(dev, non_blocking=True)
        lens = torch.tensor([len(p) for p in prompts], dtype=torch.long, device=dev)
        start = torch.tensor(starts, dtype=torch.long, device=dev)
        rows = torch.tensor(slots, dtype=torch.long, device=dev)
        positions = start.unsqueeze(1) + torch.arange(width, device=dev)  # [n, width]
        real = torch.arange(width, device=dev) < lens.unsqueeze(1)  # [n, width]
        span = max(a + len(p) for a, p in zip(starts, prompts, strict=True))
        mask = (torch.arange(span, device=dev) <= positions.unsqueeze(-1)).unsqueeze(1)
        write_rows = rows.unsqueeze(1).expand(n, width)[real]
        write_pos = positions[real]
        cos, sin = self._rope(positions)
        h = self.model.model.embed_tokens(ids)
        for i, layer in enumerate(self.model.model.layers):
            q, k, v = self._qkv(i, self._norm(layer.input_layernorm, h), cos, sin)
            self.keys[i][write_rows, :, write_pos] = k.transpose(1, 2)[real]
            self.values[i][write_rows, :, write_pos] = v.transpose(1, 2)[real]
            k, v = self.keys[i][rows, :, :span], self.values[i][rows, :, :span]
            if s.group > 1:
                k, v = k.repeat_interleave(s.group, 1), v.repeat_interleave(s.group, 1)
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scaling)
            h = self._layer_tail(i, h, o.transpose(1, 2).reshape(n, width, -1))
        h = h[torch.arange(n, device=dev), lens - 1]
        return self._logits(h)

    # ---- decode ----

    def decode(self, ids: torch.Tensor, positions: torch.Tensor, width: int) -> torch.Tensor:
        """One token for rows 0..B-1 of the cache: `ids` [B] at `positions` [B] (= tokens already
        cached in that row). Attends over the first `width` columns. Returns float32 [B, vocab].
        Rows not in use may hold anything (position 0 keeps their softmax finite)."""
        s = self.shape
        b = ids.shape[0]
        rows = torch.arange(b, device=ids.device)
        cos, sin = self._rope(positions.unsqueeze(1))
        seen = (torch.arange(width, device=ids.device) <= positions.unsqueeze(1)).view(
            b, 1, 1, width
        )
        # additive, built once: SDPA would convert a boolean mask in every layer
        mask = torch.zeros(seen.shape, dtype=self.dtype, device=ids.device)
        mask = mask.masked_fill(~seen, float("-inf"))
        h = self.model.model.embed_tokens(ids.unsqueeze(1))
        for i, layer in enumerate(self.model.model.layers):
            q, k, v = self._qkv(i, self._norm(layer.input_layernorm, h), cos, sin)
            self.keys[i][rows, :, positions] = k[:, :, 0]
            self.values[i][rows, :, positions] = v[:, :, 0]
            # the G query heads of one KV head attend as G "query positions" of that head
            q = q.reshape(b, s.kv_heads, s.group, s.head_dim)
            o = F.scaled_dot_product_attention(
                q,
                self.keys[i][:b, :, :width],
                self.values[i][:b, :, :width],
                attn_mask=mask,
                scale=self.scaling,
            )
            h = self._layer_tail(i, h, o.reshape(b, 1, s.heads * s.head_dim))
        return self._logits(h)[:, 0]
