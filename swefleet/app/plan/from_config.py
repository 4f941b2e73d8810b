"""A layout from a run config (`swefleet plan --config X.toml`): the model shape from its
preset or its checkpoint's config.json, the roles from inference/trainer, the workload from the
orchestrator and agent sections (turns, async level, episodes in flight). What a run config
does not say is assumed and returned as notes; what the planner cannot model (a CPU run) is a
ValueError (`plannable.py`)."""

from __future__ import annotations

import json
from pathlib import Path

from swefleet.app.plan.layout import Layout, validate_layout
from swefleet.app.plan.plannable import unplannable

#: Assumed tokens of a rollout's first prompt (system + task) and of each tool output after a
#: turn (a run config does not say)
PROMPT_TOKENS = 256
OBSERVATION_TOKENS = 256


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


def _turns(run) -> tuple[int, str]:
    """Model calls a rollout makes, and where the number comes from."""
    if run.environment == "token_target":
        return 1, "one turn (environment token_target)"
    n = run.agent.max_steps
    return n, f"{n} turns (agent.max_steps: the most an episode takes, an upper bound)"


def rollout_tokens(turns: int, per_turn: int, seq_len: int) -> tuple[float, float]:
    """(prompt, completion) tokens of one rollout: PROMPT_TOKENS, then `per_turn` generated and
    OBSERVATION_TOKENS of tool output a turn (none after the last); scaled down together to
    `seq_len` when longer (the episode stops at its context budget)."""
    prompt = PROMPT_TOKENS + (turns - 1) * OBSERVATION_TOKENS
    completion = turns * per_turn
    scale = min(1.0, seq_len / (prompt + completion))
    return prompt * scale, min(completion * scale, seq_len - prompt * scale)  # no rounding over


def _tokens_note(turns: int, per_turn: int, prompt: float, completion: float,
                 seq_len: int) -> str:
    parts = f"{PROMPT_TOKENS} of system and task"
    if turns > 1:
        parts += f" + {turns - 1} x {OBSERVATION_TOKENS} of tool output"
    cut = prompt + completion < PROMPT_TOKENS + (turns - 1) * OBSERVATION_TOKENS + turns * per_turn
    return (f"assumed {prompt:,.0f} prompt tokens ({parts}) and {completion:,.0f} completion "
            f"tokens ({turns} x {per_turn}, agent.max_tokens_per_turn) a rollout"
            + (f", scaled down to seq_len {seq_len}" if cut else ""))


def _workload(run, seq_len: int) -> tuple[dict, list[str]]:
    """Workload fields from the agent and orchestrator sections, and the notes they need."""
    orch = run.orchestrator
    turns, turns_note = _turns(run)
    per_turn = min(run.agent.max_tokens_per_turn, seq_len // 2)
    prompt, completion = rollout_tokens(turns, per_turn, seq_len)
    per_step = orch.groups_per_step * orch.rollouts_per_task
    inflight = min((orch.async_level + 1) * per_step, orch.max_concurrent_episodes)
    sync = "sync" if orch.async_level == 0 else "async"
    fields = {"seq_len": seq_len, "rollouts_per_step": per_step, "prompt_tokens": prompt,
              "completion_tokens": completion, "inflight_rollouts": inflight, "sync": sync,
              "weight_sync": run.inference.weight_sync}
    step = ("synchronous: a step is rollouts + train + weight sync" if sync == "sync"
            else "rollouts overlap training: a step is max(rollouts, train) + weight sync")
    notes = [f"{turns_note}; " + _tokens_note(turns, per_turn, prompt, completion, seq_len),
             (f"orchestrator.async_level = {orch.async_level}, {step}; {inflight} rollouts "
              f"in flight = min((async_level + 1) x {per_step} a step, "
              "max_concurrent_episodes)")]
    return fields, notes


def layout_from_run_config(path: str) -> tuple[Layout, list[str]]:
    """Layout + the assumptions made (one line each). ValueError (one line) for a config the
    planner cannot model: CPU roles, external servers, several nodes."""
    from swefleet.app.config import load_config

    run = load_config(path)
    why = unplannable(run)
    if why:
        raise ValueError(f"{path}: {why}")
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
    workload, workload_notes = _workload(run, seq_len)
    data = {
        "name": run.name, "model": shape,
        "cluster": {"nodes": 1, "gpus_per_node": n_gpus, "colocated": colocated},
        "inference": {"servers": inf.num_servers, "tp": tp, "dp": dp, "expert_parallel": ep,
                      "gpu_memory_utilization": inf.gpu_memory_fraction
                      or (0.35 if colocated else 0.9)},
        "trainer": {"gpus": tr.ranks, "expert_parallel": tr.expert_parallel,
                    "micro_batch_tokens": tr.micro_batch_tokens},
        "workload": workload,
        "price": {"gpu_hour": orch.gpu_hour_price, "currency": orch.currency},
    }
    notes = [f"model shape from {source}", *workload_notes,
             "assumed H200 GPUs, default MFU and bandwidth shares"]
    if tr.device == "auto":
        notes.append("trainer.device = 'auto': planned on GPUs")
    return validate_layout(data, path), notes
