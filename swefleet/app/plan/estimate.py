"""Apply the formulas to a layout: one dict of named, unit-suffixed answers per section."""

from __future__ import annotations

from swefleet.app.plan import formulas as f
from swefleet.app.plan.layout import Layout, ModelShape


def model_params(m: ModelShape) -> dict[str, float]:
    """Total, expert, non-expert and per-token-active parameter counts, and the matmul params
    of one token (every linear plus the lm_head: the 6N of the FLOPs count)."""
    attn = m.attention_params_per_layer or f.gqa_attention_params(
        m.hidden_size, m.num_heads, m.num_kv_heads, m.head_dim)
    dense_mlp = f.swiglu_params(m.hidden_size, m.intermediate_size)
    embed = m.vocab_size * m.hidden_size
    head = 0 if m.tie_embeddings else embed
    if m.num_experts:
        moe_layers = m.num_layers - m.dense_layers
        routed = moe_layers * m.num_experts * f.swiglu_params(m.hidden_size,
                                                              m.moe_intermediate_size)
        moe_all = moe_layers * f.moe_layer_params(m.hidden_size, m.moe_intermediate_size,
                                                  m.num_experts, m.shared_experts)
        moe_active = moe_layers * f.moe_active_params(
            m.hidden_size, m.moe_intermediate_size, m.num_experts, m.top_k, m.shared_experts)
        mlp_all = m.dense_layers * dense_mlp + moe_all
        mlp_active = m.dense_layers * dense_mlp + moe_active
    else:
        moe_layers, routed = 0, 0
        mlp_all = mlp_active = m.num_layers * dense_mlp
    layers_all = m.num_layers * attn + mlp_all
    layers_active = m.num_layers * attn + mlp_active
    total = embed + head + layers_all
    return {"total": total, "experts": routed, "non_expert": total - routed,
            "active": embed + head + layers_active,
            "matmul_active": layers_active + embed, "moe_layers": moe_layers,
            "embedding": embed, "lm_head": head}


def mlp_width_active(m: ModelShape) -> float:
    """Mean SwiGLU width one token's activations span per layer (dense and MoE layers)."""
    if not m.num_experts:
        return m.intermediate_size
    moe = (m.top_k + m.shared_experts) * m.moe_intermediate_size
    return (m.dense_layers * m.intermediate_size
            + (m.num_layers - m.dense_layers) * moe) / m.num_layers


def kv_token_bytes(lay: Layout) -> float:
    m = lay.model
    elems = m.kv_elems_per_token_per_layer or 2 * m.num_kv_heads * m.head_dim
    return f.kv_bytes_per_token(m.num_layers, elems, lay.inference.kv_bytes,
                                m.indexer_bytes_per_token_per_layer)


def kv_shard(lay: Layout) -> int:
    """GPUs of a tp group one token's KV is split over: MLA latents are replicated."""
    m = lay.model
    return 1 if m.kv_elems_per_token_per_layer else min(lay.inference.tp, m.num_kv_heads)


def gpus(lay: Layout) -> dict[str, int]:
    inf, c = lay.inference, lay.cluster
    infer = inf.servers * inf.tp * inf.dp
    return {"inference": infer, "trainer": lay.trainer.gpus,
            "idle": c.nodes * c.gpus_per_node - (max(infer, lay.trainer.gpus) if c.colocated
                                                 else infer + lay.trainer.gpus),
            "total": c.nodes * c.gpus_per_node}


def inference(lay: Layout, p: dict) -> dict[str, float]:
    """Weights and KV per GPU, KV capacity, the decode step at the batch the fleet runs,
    throughput, prefill, and the rollout phase of one step."""
    m, inf, g, w = lay.model, lay.inference, lay.gpu, lay.workload
    server_gpus = inf.tp * inf.dp
    expert_split = server_gpus if inf.expert_parallel else inf.tp
    dense_w = p["non_expert"] * inf.weight_bytes / inf.tp
    expert_w = p["experts"] * inf.weight_bytes / expert_split
    share = inf.gpu_memory_utilization * g.memory_gib * f.GIB
    free = share - dense_w - expert_w - inf.reserve_gib * f.GIB
    kvt = kv_token_bytes(lay)
    cap_tokens = f.kv_capacity_tokens(max(free, 0.0), kvt, kv_shard(lay), inf.dp)
    total_tokens = w.prompt_tokens + w.completion_tokens
    resident = total_tokens / 2  # mean context over a rollout's life (linear growth)
    kv_seqs = cap_tokens / resident
    inflight = w.inflight_rollouts or w.rollouts_per_step
    batch = min(inflight / inf.servers, kv_seqs, inf.max_num_seqs * inf.dp)
    rank_batch = batch / inf.dp
    touched = 1.0
    if m.num_experts:
        tokens_seen = batch if inf.expert_parallel else rank_batch
        touched = f.experts_touched_fraction(m.num_experts, m.top_k, tokens_seen)
    attended = resident if m.sparse_attention_topk is None else min(resident,
                                                                     m.sparse_attention_topk)
    index_read = m.num_layers * m.indexer_bytes_per_token_per_layer * resident
    kv_read = rank_batch * ((kvt - m.num_layers * m.indexer_bytes_per_token_per_layer)
                            * attended + index_read) / kv_shard(lay)
    step_s = f.decode_step_seconds(dense_w + expert_w * touched, kv_read, g.hbm_tb_s * 1e12,
                                   inf.decode_bandwidth_efficiency)
    server_tok_s = batch / step_s
    fleet_tok_s = server_tok_s * inf.servers
    decode_s = w.rollouts_per_step * w.completion_tokens / fleet_tok_s
    prefill_flops = w.rollouts_per_step * (
        2 * p["matmul_active"] * w.prompt_tokens
        + f.train_attention_flops(m.num_layers, m.num_heads, m.head_dim, w.prompt_tokens,
                                  m.sparse_attention_topk) / 3)
    prefill_s = f.compute_seconds(prefill_flops, inf.servers * server_gpus,
                                  g.bf16_tflops * 1e12, inf.prefill_mfu)
    return {"weights_gib_per_gpu": (dense_w + expert_w) / f.GIB,
            "kv_free_gib_per_gpu": free / f.GIB, "kv_bytes_per_token": kvt,
            "kv_capacity_tokens_per_server": cap_tokens,
            "mean_resident_context_tokens": resident, "kv_inflight_seqs_per_server": kv_seqs,
            "decode_batch_per_server": batch, "experts_touched_fraction": touched,
            "decode_step_ms": step_s * 1e3, "decode_tokens_per_s_per_server": server_tok_s,
            "decode_tokens_per_s_fleet": fleet_tok_s, "decode_s": decode_s,
            "prefill_s": prefill_s, "rollout_s": decode_s + prefill_s,
            "single_rollout_latency_s": w.completion_tokens * step_s
            + w.env_seconds_per_rollout}


def trainer(lay: Layout, p: dict) -> dict[str, float]:
    """Memory per GPU (sharded state, gathered weights, activations, logits) and step time."""
    m, t, g, w = lay.model, lay.trainer, lay.gpu, lay.workload
    state = f.sharded_state_bytes(p["total"], t.shard, t.master_bytes, t.grad_bytes,
                                  0.0 if t.optimizer_cpu_offload else t.optimizer_bytes)
    outside = p["embedding"] + p["lm_head"]
    layer_params = (p["total"] - outside) / m.num_layers
    if m.num_experts:
        layer_params = (p["non_expert"] - outside) / m.num_layers + (
            p["experts"] / p["moe_layers"] / t.expert_parallel)
    gathered = 2 * layer_params * t.compute_bytes  # this block and the prefetched next one
    tokens_gpu = (t.micro_batch_tokens or w.seq_len) / t.context_parallel
    per_tl = f.activation_bytes_per_token_layer(m.hidden_size, m.num_heads, m.num_kv_heads,
                                                m.head_dim, mlp_width_active(m),
                                                t.compute_bytes)
    acts = f.activation_bytes(tokens_gpu, m.num_layers, per_tl, m.hidden_size,
                              t.activation_checkpointing, t.residual_bytes)
    logits = f.logits_bytes(tokens_gpu, m.vocab_size, t.logits_bytes)
    total = sum(state.values()) + gathered + acts + logits
    # colocated: the inference server holds its share of the GPU
    room = g.memory_gib * ((1 - lay.inference.gpu_memory_utilization)
                           if lay.cluster.colocated else 1.0)
    seq = w.prompt_tokens + w.completion_tokens
    tokens = w.rollouts_per_step * seq
    matmul = f.train_matmul_flops(p["matmul_active"], tokens)
    attn = w.rollouts_per_step * f.train_attention_flops(
        m.num_layers, m.num_heads, m.head_dim, seq, m.sparse_attention_topk)
    step_s = f.compute_seconds(matmul + attn, t.gpus, g.bf16_tflops * 1e12, t.mfu)
    out = {f"mem_{k}_gib_per_gpu": v / f.GIB for k, v in state.items()}
    out.update({"mem_gathered_weights_gib_per_gpu": gathered / f.GIB,
                "mem_activations_gib_per_gpu": acts / f.GIB,
                "mem_logits_gib_per_gpu": logits / f.GIB, "mem_total_gib_per_gpu": total / f.GIB,
                "mem_room_gib_per_gpu": room,
                "mem_fits": total / f.GIB <= room, "tokens_per_step": tokens,
                "flops_matmul": matmul, "flops_attention": attn, "train_s": step_s,
                "tokens_per_s": tokens / step_s})
    return out


def traffic(lay: Layout, p: dict, inf: dict, tr: dict) -> dict[str, float]:
    """Router-replay payload, EP all-to-all bytes and time, KV-offload I/O."""
    m, t, g, c, w = lay.model, lay.trainer, lay.gpu, lay.cluster, lay.workload
    out: dict[str, float] = {}
    if m.num_experts:
        rr = f.router_replay_bytes_per_token(p["moe_layers"], m.top_k, m.num_experts)
        rate = tr["tokens_per_step"] / inf["rollout_s"]
        out.update({"router_replay_bytes_per_token": rr,
                    "router_replay_mb_per_rollout":
                        rr * (w.prompt_tokens + w.completion_tokens) / 1e6,
                    "router_replay_gbit_s_fleet": f.gbit_s(rr * rate)})
        tokens_gpu = tr["tokens_per_step"] / t.gpus
        ep_bytes = f.ep_dispatch_combine_bytes(tokens_gpu, m.top_k, m.hidden_size,
                                               t.compute_bytes, t.expert_parallel)
        link = (g.nvlink_gb_s / 2 * 1e9 if t.expert_parallel <= c.gpus_per_node
                else g.internode_gbit_s / 8 * 1e9)
        step_bytes = 2 * p["moe_layers"] * ep_bytes  # forward and backward
        out.update({"ep_bytes_per_layer_per_step_per_gpu": 2 * ep_bytes,
                    "ep_all_to_all_s_per_step": f.transfer_seconds(step_bytes, link)})
    if w.turns_per_rollout:
        per_turn = f.kv_offload_bytes_per_turn(inf["mean_resident_context_tokens"],
                                               inf["kv_bytes_per_token"])
        out.update({"kv_offload_gb_per_turn": per_turn / 1e9,
                    "kv_offload_s_per_turn": f.transfer_seconds(
                        per_turn, c.host_link_gb_s * 1e9, lay.inference.tp)})
    return out


def weight_sync(lay: Layout, p: dict) -> dict[str, float]:
    """Bytes of one update and its time over the inter-node link, NVLink and the filesystem;
    `sync_s` is the one the layout uses."""
    g, c, w = lay.gpu, lay.cluster, lay.workload
    nbytes = p["total"] * w.weight_sync_bytes
    ib = f.transfer_seconds(nbytes, g.internode_gbit_s / 8 * 1e9, w.weight_sync_senders)
    nvl = f.transfer_seconds(nbytes, g.nvlink_gb_s / 2 * 1e9, w.weight_sync_senders)
    fs = f.filesystem_sync_seconds(nbytes, c.disk_gb_s * 1e9)
    same_node = c.colocated or c.nodes == 1
    chosen = fs if w.weight_sync == "filesystem" else (nvl if same_node else ib)
    return {"bytes": nbytes, "nccl_internode_s": ib, "nccl_nvlink_s": nvl,
            "filesystem_s": fs, "sync_s": chosen}


def plan(lay: Layout) -> dict:
    """Every answer of the planner for one layout."""
    p = model_params(lay.model)
    inf = inference(lay, p)
    tr = trainer(lay, p)
    sync = weight_sync(lay, p)
    step = f.step_seconds(inf["rollout_s"], tr["train_s"], sync["sync_s"], lay.workload.sync)
    g = gpus(lay)
    price, gpu_min = f.cost_per_rollout(g["total"], step, lay.workload.rollouts_per_step,
                                        lay.price.gpu_hour)
    parts = {"rollout": inf["rollout_s"], "train": tr["train_s"], "weight_sync": sync["sync_s"]}
    return {"layout": lay.name, "model": lay.model.name, "gpus": g,
            "params": dict(p), "inference": inf, "trainer": tr,
            "traffic": traffic(lay, p, inf, tr), "weight_sync": sync,
            "step": {"rollout_s": inf["rollout_s"], "train_s": tr["train_s"],
                     "weight_sync_s": sync["sync_s"], "mode": lay.workload.sync,
                     "step_s": step, "dominant": max(parts, key=parts.get)},
            "cost": {"per_rollout": price, "currency": lay.price.currency,
                     "gpu_minutes_per_rollout": gpu_min,
                     "per_step": price * lay.workload.rollouts_per_step}}
