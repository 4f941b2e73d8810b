"""A layout from a run config (`swefleet plan --config X.toml`): the model shape from its
preset or its checkpoint's config.json, the roles from inference/trainer, the workload from the
orchestrator and agent sections. What a run config does not say is assumed and returned as
notes."""

from __future__ import annotations

import json
from pathlib import Path

from swefleet.app.plan.layout import Layout, validate_layout


def shape_from_hf(cfg: dict, name: str) -> dict:
    """ModelShape fields from an HF config.json dict (Qwen3 / Qwen3-MoE / DeepSeek-style keys)."""
    heads = cfg["num_attention_heads"]
    shape = {"name": name, "hidden_size": cfg["hidden_size"],
             "num_layers": cfg["num_hidden_layers"], "num_heads": heads,
             "num_kv_heads": cfg.get("num_key_value_heads", heads),
             "head_dim": cfg.get("head_dim") or cfg["hidden_size"] // heads,
             "vocab_size": cfg["vocab_size"], "intermediate_size": cfg["intermediate_size"],
             "tie_embeddings": bool(cfg.get("tie_word_embeddings", False))}
    if cfg.get("kv_lora_rank"):
        shape.update(_mla(cfg))
    experts = cfg.get("num_experts") or cfg.get("n_routed_experts") or 0
    if experts:
        shape.update({"num_experts": experts, "top_k": cfg["num_experts_per_tok"],
                      "moe_intermediate_size": cfg["moe_intermediate_size"],
                      "shared_experts": cfg.get("n_shared_experts") or 0,
                      "dense_layers": cfg.get("first_k_dense_replace")
                      or len(cfg.get("mlp_only_layers") or [])})
    return shape


def _mla(cfg: dict) -> dict:
    """DeepSeek/GLM-5 multi-head latent attention: the cache keeps the latent (kv_lora_rank +
    qk_rope_head_dim per token per layer); the weights are q_a, q_b (or q), kv_a, kv_b, o."""
    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    rope, nope, v = cfg["qk_rope_head_dim"], cfg["qk_nope_head_dim"], cfg["v_head_dim"]
    kv_rank, q_rank = cfg["kv_lora_rank"], cfg.get("q_lora_rank")
    q = h * q_rank + q_rank * heads * (nope + rope) if q_rank else h * heads * (nope + rope)
    attn = q + h * (kv_rank + rope) + kv_rank * heads * (nope + v) + heads * v * h
    out = {"attention_params_per_layer": attn, "kv_elems_per_token_per_layer": kv_rank + rope,
           "num_kv_heads": heads, "head_dim": (nope + rope + v) // 2}
    if cfg.get("index_topk"):
        out["sparse_attention_topk"] = cfg["index_topk"]
    return out


def _shape(run) -> tuple[dict, str]:
    path = Path(run.model.path) / "config.json" if run.model.path else None
    if path and path.is_file():
        return shape_from_hf(json.loads(path.read_text()), path.parent.name), str(path)
    from swefleet.tinymodel import PRESETS

    preset = dict(PRESETS[run.model.preset])
    return shape_from_hf(preset, run.model.preset), f"preset {run.model.preset}"


def layout_from_run_config(path: str) -> tuple[Layout, list[str]]:
    """Layout + the assumptions made (one line each)."""
    from swefleet.app.config import load_config

    run = load_config(path)
    shape, source = _shape(run)
    inf, tr, orch = run.inference, run.trainer, run.orchestrator
    tp = inf.vllm.tensor_parallel_size if inf.resolved_kind == "vllm" else 1
    dp = inf.vllm.data_parallel_size if inf.resolved_kind == "vllm" else 1
    ep = inf.resolved_kind == "vllm" and inf.vllm.enable_expert_parallel
    infer_gpus, train_gpus = set(inf.gpus), set(tr.gpus)
    colocated = bool(infer_gpus & train_gpus) or not (infer_gpus or train_gpus)
    n_gpus = max(len(infer_gpus | train_gpus), 1)
    seq_len = (inf.vllm.max_model_len if inf.resolved_kind == "vllm"
               else run.agent.context_budget_tokens)
    completion = min(run.agent.max_tokens_per_turn, seq_len // 2)
    prompt = min(256, seq_len - completion)
    data = {
        "name": run.name, "model": shape,
        "cluster": {"nodes": 1, "gpus_per_node": n_gpus, "colocated": colocated},
        "inference": {"servers": inf.num_servers, "tp": tp, "dp": dp, "expert_parallel": ep,
                      "gpu_memory_utilization": inf.gpu_memory_fraction
                      or (0.35 if colocated else 0.9)},
        "trainer": {"gpus": tr.ranks, "expert_parallel": tr.expert_parallel,
                    "micro_batch_tokens": tr.micro_batch_tokens},
        "workload": {"seq_len": seq_len,
                     "rollouts_per_step": orch.groups_per_step * orch.rollouts_per_task,
                     "prompt_tokens": prompt, "completion_tokens": completion,
                     "weight_sync": inf.weight_sync},
        "price": {"gpu_hour": orch.gpu_hour_price, "currency": orch.currency},
    }
    notes = [f"model shape from {source}",
             (f"assumed {prompt} prompt tokens and {completion} completion tokens a rollout "
              "(agent.max_tokens_per_turn); one turn"),
             "assumed H200 GPUs, default MFU and bandwidth shares"]
    return validate_layout(data, path), notes
