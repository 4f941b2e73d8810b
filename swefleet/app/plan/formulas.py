"""Pure planning formulas: numbers in, numbers out, one named formula each (written out in
docs/planning.md). Bytes, seconds, FLOPs; GB = 1e9 bytes, GiB = 2**30 bytes."""

from __future__ import annotations

GIB = 2**30


# --- parameters -------------------------------------------------------------------------------

def swiglu_params(hidden: int, width: int) -> int:
    """Gate, up and down projections: 3 x hidden x width."""
    return 3 * hidden * width


def gqa_attention_params(hidden: int, heads: int, kv_heads: int, head_dim: int) -> int:
    """q and o (hidden x heads x head_dim each) plus k and v (hidden x kv_heads x head_dim)."""
    return hidden * head_dim * (2 * heads + 2 * kv_heads)


def moe_layer_params(hidden: int, width: int, experts: int, shared: int) -> int:
    """Routed + shared experts and the router (hidden x experts)."""
    return (experts + shared) * swiglu_params(hidden, width) + hidden * experts


def moe_active_params(hidden: int, width: int, experts: int, top_k: int, shared: int) -> int:
    """What one token multiplies with in a MoE layer: top_k + shared experts and the router."""
    return (top_k + shared) * swiglu_params(hidden, width) + hidden * experts


# --- inference --------------------------------------------------------------------------------

def kv_bytes_per_token(layers: int, kv_elems_per_layer: int, kv_bytes: float,
                       indexer_bytes_per_layer: int = 0) -> float:
    """KV cache of one token: layers x (elements per layer x bytes + indexer bytes); for GQA the
    elements are 2 x kv_heads x head_dim."""
    return layers * (kv_elems_per_layer * kv_bytes + indexer_bytes_per_layer)


def kv_capacity_tokens(free_bytes_per_gpu: float, kv_token_bytes: float, kv_shard: int,
                       dp: int) -> float:
    """Tokens one server holds: each tp group stores a token's KV split over kv_shard GPUs
    (min(tp, kv_heads) for GQA, 1 for MLA's replicated latent), dp groups side by side:
    dp x free x kv_shard / kv_token_bytes."""
    return dp * free_bytes_per_gpu * kv_shard / kv_token_bytes


def experts_touched_fraction(experts: int, top_k: int, tokens: float) -> float:
    """Expected share of a layer's experts that at least one of `tokens` routes to (uniform
    routing): 1 - (1 - top_k / experts) ** tokens."""
    return 1.0 - (1.0 - top_k / experts) ** tokens


def decode_step_seconds(weight_bytes_read: float, kv_bytes_read: float, hbm_bytes_s: float,
                        efficiency: float) -> float:
    """Memory-bound decode step on one GPU: (weights read + KV read) / (HBM x efficiency)."""
    return (weight_bytes_read + kv_bytes_read) / (hbm_bytes_s * efficiency)


def compute_seconds(flops: float, gpus: int, peak_flops: float, utilisation: float) -> float:
    """FLOPs / (GPUs x peak x utilisation)."""
    return flops / (gpus * peak_flops * utilisation)


def router_replay_bytes_per_token(moe_layers: int, top_k: int, experts: int) -> int:
    """Routed-expert ids of one token: MoE layers x top_k x index bytes (uint8 up to 256
    experts, else uint16)."""
    return moe_layers * top_k * (1 if experts <= 256 else 2)


def gbit_s(bytes_per_s: float) -> float:
    """Bytes/s to Gbit/s."""
    return bytes_per_s * 8 / 1e9


def kv_offload_bytes_per_turn(context_tokens: float, kv_token_bytes: float) -> float:
    """KV moved to host memory and back while a tool runs: 2 x context x KV bytes/token."""
    return 2 * context_tokens * kv_token_bytes


# --- trainer ----------------------------------------------------------------------------------

def train_matmul_flops(matmul_active_params: float, tokens: float) -> float:
    """6 x active matmul params x tokens (forward 2, backward 4)."""
    return 6 * matmul_active_params * tokens


def train_attention_flops(layers: int, heads: int, head_dim: int, seq: float,
                          window: int | None = None) -> float:
    """Causal attention of one sequence, forward + backward: a query with c keys costs
    4 x heads x head_dim x c FLOPs per layer forward (q.k and a.v), x3 with backward, so
    12 x layers x heads x head_dim x sum over positions of the keys attended. Dense: the sum
    is seq^2 / 2 (6 L H d S^2); a window w < seq (sparse top-k): seq x w - w^2 / 2."""
    attended = seq * seq / 2 if window is None or window >= seq else seq * window - window**2 / 2
    return 12 * layers * heads * head_dim * attended


def sharded_state_bytes(params: float, shard: int, master: float, grad: float,
                        optimizer: float) -> dict[str, float]:
    """Weights, grads and optimizer state of `params`, each split over `shard` ranks."""
    return {"weights": params * master / shard, "grads": params * grad / shard,
            "optimizer": params * optimizer / shard}


def activation_bytes_per_token_layer(hidden: int, heads: int, kv_heads: int, head_dim: int,
                                     mlp_width_active: float, elem_bytes: float) -> float:
    """Activations one token keeps per layer without recompute (flash attention keeps no score
    matrix): two norm inputs (2h), the qkv input (h), q/k/v (H d + 2 K d), the attention output
    (H d), the MLP input (h) and its gate, up and product outputs (3 x active width), each
    elem_bytes."""
    qkv = heads * head_dim + 2 * kv_heads * head_dim
    return elem_bytes * (4 * hidden + qkv + heads * head_dim + 3 * mlp_width_active)


def activation_bytes(tokens: float, layers: int, per_token_layer: float, hidden: int,
                     ac: str, residual_bytes: float) -> float:
    """none: tokens x layers x per-token-layer bytes; selective: half of that (assumption);
    full: each block's input (tokens x layers x hidden x residual bytes) plus one block's
    activations while it is recomputed."""
    full_layer = tokens * per_token_layer
    if ac == "none":
        return layers * full_layer
    if ac == "selective":
        return 0.5 * layers * full_layer
    return tokens * layers * hidden * residual_bytes + full_layer


def logits_bytes(tokens: float, vocab: int, elem_bytes: float) -> float:
    """Softmax kept for the lm_head backward: tokens x vocab x bytes."""
    return tokens * vocab * elem_bytes


def ep_dispatch_combine_bytes(tokens: float, top_k: int, hidden: int, elem_bytes: float,
                              ep: int) -> float:
    """All-to-all bytes one rank sends per MoE layer per pass: dispatch + combine of its
    tokens' top_k copies, the share leaving the rank: 2 x tokens x top_k x hidden x bytes x
    (ep - 1) / ep."""
    return 2 * tokens * top_k * hidden * elem_bytes * (ep - 1) / ep


# --- weight sync and the step ------------------------------------------------------------------

def transfer_seconds(nbytes: float, bytes_per_s: float, parallel: int = 1) -> float:
    """bytes / (link bandwidth x links used at once); a pipelined broadcast costs about one
    pass over the slowest link, whatever the number of receivers."""
    return nbytes / (bytes_per_s * parallel)


def filesystem_sync_seconds(nbytes: float, disk_bytes_s: float) -> float:
    """Write the files, then the servers read them: 2 x bytes / disk bandwidth."""
    return 2 * nbytes / disk_bytes_s


def step_seconds(rollout_s: float, train_s: float, sync_s: float, mode: str) -> float:
    """async: rollouts overlap training, step = max(rollout, train) + sync; sync: rollout +
    train + sync."""
    if mode == "async":
        return max(rollout_s, train_s) + sync_s
    return rollout_s + train_s + sync_s


def cost_per_rollout(gpus: int, step_s: float, rollouts: int,
                     gpu_hour_price: float) -> tuple[float, float]:
    """(price, GPU-minutes) per rollout: every GPU of the layout is paid for the whole step:
    GPU-minutes = gpus x step_s / 60 / rollouts; price = GPU-minutes / 60 x gpu_hour_price."""
    gpu_min = gpus * step_s / 60 / rollouts
    return gpu_min / 60 * gpu_hour_price, gpu_min
