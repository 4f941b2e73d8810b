"""Router replay end to end: the embedded engine generates on a Qwen3-MoE and returns its routed
experts; the trainer recomputes the log-probs of the same tokens with and without replaying
them; the mismatch KL mean(exp(d) - d - 1), d = log pi_trainer - log mu_engine, measures how far
apart the two are. Used by `benchmarks/router_replay.py` and the tests.

Random-init weights are drawn "sharp" (`gain` / sqrt(fan_in), norms around 1): routing and
next-token distributions far from uniform, as in a trained model, so that a different expert
choice visibly moves the log-probs.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from swefleet import routed_experts
from swefleet.batch import pack_samples

#: Qwen3-MoE shapes: `tiny` for CPU tests, `small` for a CPU benchmark in seconds,
#: `30b-a3b-8l`: Qwen3-30B-A3B's layer shape (128 experts, top 8), first 8 of its 48 layers.
SHAPES: dict[str, dict] = {
    "tiny": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "moe_intermediate_size": 32,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 256,
        "num_experts": 8,
        "num_experts_per_tok": 2,
    },
    "small": {
        "hidden_size": 128,
        "intermediate_size": 256,
        "moe_intermediate_size": 64,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 32,
        "vocab_size": 1024,
        "num_experts": 16,
        "num_experts_per_tok": 4,
    },
    "30b-a3b-8l": {
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "moe_intermediate_size": 768,
        "num_hidden_layers": 8,
        "num_attention_heads": 32,
        "num_key_value_heads": 4,
        "head_dim": 128,
        "vocab_size": 151936,
        "num_experts": 128,
        "num_experts_per_tok": 8,
    },
}


def make_moe_checkpoint(
    out: str | Path,
    shape: str | dict = "tiny",
    *,
    seed: int = 0,
    gain: float = 2.0,
    dtype: torch.dtype = torch.float32,
    device: str = "cpu",
) -> Path:
    """A random-init Qwen3-MoE HF checkpoint (safetensors in `dtype`) at `out`."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    dims = SHAPES[shape] if isinstance(shape, str) else shape
    config = Qwen3MoeConfig(
        **dims,
        norm_topk_prob=True,
        tie_word_embeddings=False,
        max_position_embeddings=4096,
        eos_token_id=0,
        bos_token_id=None,
        pad_token_id=None,
    )
    torch.manual_seed(seed)
    with torch.device(device):
        model = Qwen3MoeForCausalLM(config).to(dtype)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.copy_(1 + 0.3 * torch.randn_like(p))
            else:
                p.copy_(gain * torch.randn_like(p) / p.shape[-1] ** 0.5)
    model.save_pretrained(out)
    return Path(out)


@dataclass
class Rollout:
    prompt: list[int]
    tokens: list[int]
    logprobs: list[float]
    routed: np.ndarray
    """(prompt + generated - 1, layers, top_k) as returned on the wire (decoded)."""


def engine_rollouts(
    ckpt: str | Path,
    prompts: list[list[int]],
    max_tokens: int,
    *,
    device: str = "cpu",
    dtype: str = "float32",
    seed: int = 0,
) -> list[Rollout]:
    """Sample `max_tokens` per prompt (temperature 1) with the embedded engine, all prompts in
    one continuous batch; routed experts go through the wire encoding (base64 .npy)."""
    from swefleet.inference.engine.core import Engine, SamplingParams
    from swefleet.inference.engine.model import load_model

    loaded = load_model(ckpt, device=device, dtype=dtype)
    engine = Engine(
        loaded.model,
        frozenset(),
        max_model_len=loaded.max_model_len,
        max_batch_size=len(prompts),
        kv_mode="dynamic",
    )
    results: list = [None] * len(prompts)
    done = threading.Semaphore(0)

    def waiter(i: int):
        def on_done(value) -> None:
            results[i] = value
            done.release()

        return on_done

    engine.start()
    try:
        for i, prompt in enumerate(prompts):
            params = SamplingParams(max_tokens=max_tokens, seed=seed + i, ignore_eos=True)
            engine.submit(prompt, params, waiter(i))
        for _ in prompts:
            if not done.acquire(timeout=1800):
                raise TimeoutError("engine did not finish")
    finally:
        engine.shutdown()
    out = []
    for prompt, r in zip(prompts, results, strict=True):
        if isinstance(r, BaseException):
            raise r
        routed = routed_experts.decode(routed_experts.encode(r.routed_experts))
        out.append(Rollout(prompt, r.token_ids, r.logprobs, routed))
    return out


def rollout_batch(rollouts: list[Rollout], replay: bool) -> dict[str, np.ndarray]:
    """The trainer batch of the rollouts (generated tokens trained), with their routing if
    `replay`."""
    samples = []
    for r in rollouts:
        n = len(r.prompt) + len(r.tokens)
        sample = {
            "tokens": r.prompt + r.tokens,
            "loss_mask": [False] * len(r.prompt) + [True] * len(r.tokens),
            "inference_logprobs": [0.0] * len(r.prompt) + list(r.logprobs),
            "advantage": 0.0,
            "policy_version": 0,
        }
        if replay:
            sample["routed_experts"] = routed_experts.sample_routing([(n, r.routed)], n)
        samples.append(sample)
    return pack_samples(samples)


def mismatch_kl(trainer_logp: np.ndarray, arrays: dict[str, np.ndarray]) -> float:
    """mean(exp(d) - d - 1) over trained tokens, d = trainer - inference log-prob. Every token
    here was sampled from the checkpoint the trainer loads (no stale token), so this is the
    trainer's `mismatch_kl` (engine vs trainer), with no `staleness_kl` part."""
    mask = arrays["loss_mask"]
    d = trainer_logp[mask].astype(np.float64) - arrays["inference_logprobs"][mask]
    return float(np.mean(np.exp(d) - d - 1))


def trainer_mismatch(
    ckpt: str | Path,
    rollouts: list[Rollout],
    *,
    device: str = "cpu",
    attention: str = "sdpa",
    autocast_dtype: torch.dtype | None = None,
) -> dict[str, float | np.ndarray]:
    """Trainer log-probs of the rollouts' tokens without and with router replay, the mismatch
    KL of each against the engine's log-probs, and `expert_agreement`: the fraction of (token,
    layer) pairs where the trainer's own top-k set equals the engine's."""
    from swefleet.trainer import router_replay
    from swefleet.trainer.expert_load import token_rows
    from swefleet.trainer.forward import batch_logprobs
    from swefleet.trainer.titan import load_policy

    policy = load_policy(ckpt, torch.device(device), attention)
    out: dict[str, float | np.ndarray] = {}
    for name, replay in (("without_replay", False), ("with_replay", True)):
        arrays = rollout_batch(rollouts, replay)
        one_micro_batch = len(rollouts) * int(np.diff(arrays["cu_seqlens"]).max())
        logp = batch_logprobs(
            policy, arrays, autocast_dtype=autocast_dtype, micro_batch_tokens=one_micro_batch
        )
        out[f"logp_{name}"] = logp
        out[f"kl_{name}"] = mismatch_kl(logp, arrays)
        if not replay:
            rows = token_rows(arrays, 0, len(rollouts), attention)
            own = router_replay.recorded_routing(policy.model).cpu().numpy()[rows]
            served = rollout_batch(rollouts, True)["routed_experts"]
            last = np.cumsum([len(r.prompt) + len(r.tokens) for r in rollouts]) - 1
            keep = np.setdiff1d(np.arange(len(own)), last)  # last tokens: padded, not served
            same = np.sort(own[keep], -1) == np.sort(served[keep].astype(own.dtype), -1)
            out["expert_agreement"] = float(same.all(-1).mean())
    return out
