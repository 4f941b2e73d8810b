"""Trainer on CUDA: fp32 parity with transformers, varlen + bf16 packing, the process loop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from swefleet.batch import batch_path, pack_samples, write_batch
from swefleet.tinymodel import create_tiny_model
from tests.models import sharp_copy

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def sharp(tmp_path_factory) -> Path:
    """Tiny Qwen3 with large random weights (log-probs far from uniform)."""
    tiny = create_tiny_model(tmp_path_factory.getbasetemp() / "tiny-qwen3", seed=0)
    return sharp_copy(tiny, tmp_path_factory.mktemp("sharp"))


def _samples(lengths, seed=0):
    rng = np.random.default_rng(seed)
    return [
        {
            "tokens": rng.integers(3, 1024, n).tolist(),
            "loss_mask": [False] * 3 + [True] * (n - 3),
            "inference_logprobs": [0.0] * n,
            "advantage": float(i % 2 * 2 - 1),
            "policy_version": 0,
        }
        for i, n in enumerate(lengths)
    ]


def _hf_logprobs(ckpt, samples) -> np.ndarray:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(ckpt, dtype=torch.float32).cuda()
    out = []
    with torch.no_grad():
        for s in samples:
            x = torch.tensor([s["tokens"]], device="cuda")
            logp = torch.log_softmax(model(x).logits.float(), -1)[0, :-1]
            out.append(np.concatenate([[0.0], logp.gather(-1, x[0, 1:, None])[:, 0].cpu()]))
    return np.concatenate(out).astype(np.float32)


def test_cuda_logprobs_sdpa_fp32_and_varlen_bf16(sharp):
    from swefleet.trainer.forward import batch_logprobs
    from swefleet.trainer.titan import load_policy

    samples = _samples([17, 64, 5, 33])
    arrays = pack_samples(samples)
    mask = arrays["loss_mask"]
    ref = _hf_logprobs(sharp, samples)
    sdpa = load_policy(sharp, torch.device("cuda"), "sdpa")
    got = batch_logprobs(sdpa, arrays, chunk_size=16, micro_batch_tokens=70)
    assert np.abs(got - ref)[mask].max() < 1e-4

    varlen = load_policy(sharp, torch.device("cuda"), "varlen")
    packed = batch_logprobs(varlen, arrays, autocast_dtype=torch.bfloat16)
    err = np.abs(packed - ref)[mask]
    print(f"varlen bf16 vs HF fp32: mean {err.mean():.4f} max {err.max():.4f}")
    assert err.mean() < 0.1
    # packing must not leak across samples: each sample alone gives the same numbers
    alone = np.concatenate(
        [batch_logprobs(varlen, pack_samples([s]), autocast_dtype=torch.bfloat16) for s in samples]
    )
    assert np.abs(alone - packed).max() < 1e-2


def test_cudnn_packed_attention_logprobs_and_gradients_match_varlen(sharp):
    """attention='cudnn' (long samples on cuDNN, short runs on FA2) against FA2 varlen on the
    whole model: log-probs as close to transformers' fp32 as varlen's (this sharp model's bf16
    noise is ~1e-2 per token) and the same weight gradients within bf16 noise, compiled blocks."""
    from swefleet.trainer.forward import batch_logprobs, build_micro_batch, micro_batch_logprobs
    from swefleet.trainer.titan import load_policy

    samples = _samples([1500, 30, 40, 1100, 7], seed=4)
    arrays = pack_samples(samples)
    mask = arrays["loss_mask"]
    policies = {a: load_policy(sharp, torch.device("cuda"), a, compile_blocks=True) for a in ("varlen", "cudnn")}  # fmt: skip
    lp = {a: batch_logprobs(p, arrays, autocast_dtype=torch.bfloat16, micro_batch_tokens=4096) for a, p in policies.items()}  # fmt: skip
    ref = _hf_logprobs(sharp, samples)
    err = {a: np.abs(lp[a] - ref)[mask] for a in lp}
    print({a: (round(float(e.mean()), 5), round(float(e.max()), 5)) for a, e in err.items()})
    assert err["cudnn"].mean() < 1.5 * err["varlen"].mean() + 1e-3
    assert err["cudnn"].max() < 1.5 * err["varlen"].max() + 1e-2
    grads = {}
    for name, policy in policies.items():
        mb = build_micro_batch(arrays, 0, len(samples), name, torch.device("cuda"))
        logp, _ = micro_batch_logprobs(policy, mb, 1024, torch.bfloat16, torch.bfloat16)
        logp.sum().backward()
        grads[name] = {n: p.grad.float() for n, p in policy.model.named_parameters()}
    for n, g in grads["varlen"].items():
        c = grads["cudnn"][n.replace("varlen", "cudnn")]
        rel = ((c - g).norm() / g.norm().clamp_min(1e-12)).item()
        assert torch.isfinite(c).all() and rel < 0.1, (n, rel)


@pytest.mark.parametrize("attention", ["varlen", "sdpa", "cudnn"])
def test_trainer_process_on_cuda(sharp, tmp_path, attention):
    samples = _samples([40, 25, 60, 12])
    ref = _hf_logprobs(sharp, samples)
    cu = np.cumsum([0] + [len(s["tokens"]) for s in samples])
    for i, s in enumerate(samples):
        s["inference_logprobs"] = [
            v if m else 0.0 for v, m in zip(ref[cu[i] : cu[i + 1]], s["loss_mask"])
        ]
    batches, weights = tmp_path / "batches", tmp_path / "run" / "weights"
    batches.mkdir()
    for step in (0, 1):
        write_batch(batch_path(batches, step), pack_samples(samples), {"step": step})
    dtype = "float32" if attention == "sdpa" else "bfloat16"
    job = {
        "model": str(sharp),
        "batches_dir": str(batches),
        "weights_dir": str(weights),
        "max_steps": 2,
        "trainer": {
            "device": "cuda",
            "attention": attention,
            "compute_dtype": dtype,
            "lr": 1e-4,
            "batch_timeout_s": 120,
        },
    }
    (tmp_path / "job.json").write_text(json.dumps(job))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "swefleet.trainer.main", "--config", str(tmp_path / "job.json")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sorted(p.name for p in weights.iterdir()) == ["v000001", "v000002"]
    records = [json.loads(x) for x in (tmp_path / "run" / "trainer_metrics.jsonl").open()]
    print(
        attention,
        [
            {
                k: r[k]
                for k in ("loss", "grad_norm", "mismatch_kl", "step_time_s", "peak_memory_gib")
            }
            for r in records
        ],
    )
    assert records[0]["peak_memory_gib"] > 0
    assert records[0]["mismatch_kl"] < (1e-8 if attention == "sdpa" else 1e-2)
    assert all(r["grad_norm"] > 0 and not r["skipped_update"] for r in records)


def test_chunked_lm_head_bf16_gradients_match_fp32():
    """The bf16-input / fp32-accumulate lm_head: values and both gradients close to an fp32
    reference (full logits, autograd)."""
    from swefleet.trainer.logprobs import token_logprobs

    g = torch.Generator(device="cuda").manual_seed(0)
    h = torch.randn(300, 256, device="cuda", generator=g, requires_grad=True)
    w = (torch.randn(5000, 256, device="cuda", generator=g) / 16).requires_grad_()
    t = torch.randint(0, 5000, (300,), device="cuda", generator=g)
    adv = torch.randn(300, device="cuda", generator=g)
    ref = torch.log_softmax(h @ w.t(), -1).gather(-1, t[:, None])[:, 0]
    ref_gh, ref_gw = torch.autograd.grad((ref * adv).sum(), (h, w))
    for fused in (False, True):  # eager / torch.compile'd log-softmax statistics
        got, _ = token_logprobs(h, w, t, chunk_size=128, matmul_dtype=torch.bfloat16, fused=fused)
        gh, gw = torch.autograd.grad((got * adv).sum(), (h, w))
        assert (got - ref).abs().max() < 0.05
        for a, b in ((gh, ref_gh), (gw, ref_gw)):
            assert ((a - b).norm() / b.norm()) < 2e-2


def test_compiled_selective_ac_step_matches_eager(sharp):
    """compile + selective AC is the same step as eager (bf16 noise apart)."""
    from swefleet.trainer.config import TrainerConfig
    from swefleet.trainer.step import build_optimizer, train_step
    from swefleet.trainer.titan import load_policy

    samples = _samples([40, 25, 60, 12])
    arrays = pack_samples(samples)
    cfg = TrainerConfig(device="cuda", attention="varlen", compute_dtype="bfloat16", lr=1e-4)
    out = {}
    for name, ac, comp in (("eager", "none", False), ("compiled", "selective", True)):
        policy = load_policy(
            sharp, torch.device("cuda"), "varlen", activation_checkpointing=ac, compile_blocks=comp
        )
        opt = build_optimizer(policy, cfg)
        out[name] = [train_step(policy, opt, arrays, cfg) for _ in range(2)]
    for a, b in zip(out["eager"], out["compiled"]):
        print({k: (a[k], b[k]) for k in ("loss", "grad_norm", "entropy")})
        assert abs(a["loss"] - b["loss"]) < 2e-2 * max(1.0, abs(a["loss"]))
        assert abs(a["grad_norm"] - b["grad_norm"]) < 5e-2 * a["grad_norm"]


def test_qwen3_moe_varlen_bf16_and_router_replay(tmp_path):
    """Qwen3-MoE on CUDA (grouped matmuls, varlen, bf16): close to transformers fp32; replaying
    the trainer's own routing changes nothing; a step with replayed routing trains."""
    from swefleet.trainer import router_replay
    from swefleet.trainer.config import TrainerConfig
    from swefleet.trainer.forward import batch_logprobs
    from swefleet.trainer.step import build_optimizer, train_step
    from swefleet.trainer.titan import load_policy
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    config = Qwen3MoeConfig(
        hidden_size=128, intermediate_size=256, moe_intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=1024,
        num_experts=16, num_experts_per_tok=4, norm_topk_prob=True, tie_word_embeddings=False,
    )  # fmt: skip
    torch.manual_seed(0)
    Qwen3MoeForCausalLM(config).save_pretrained(tmp_path / "moe")
    samples = _samples([40, 25, 60, 12])
    arrays = pack_samples(samples)
    ref = _hf_logprobs(tmp_path / "moe", samples)
    policy = load_policy(tmp_path / "moe", torch.device("cuda"), "varlen")
    got = batch_logprobs(policy, arrays, autocast_dtype=torch.bfloat16)
    assert np.abs(got - ref)[arrays["loss_mask"]].mean() < 0.05
    own = router_replay.recorded_routing(policy.model).cpu().numpy()
    replayed = batch_logprobs(
        policy, {**arrays, "routed_experts": own}, autocast_dtype=torch.bfloat16
    )
    assert np.abs(replayed - got).max() < 1e-6
    cfg = TrainerConfig(device="cuda", attention="varlen", compute_dtype="bfloat16", lr=1e-4)
    metrics = train_step(
        policy, build_optimizer(policy, cfg), {**arrays, "routed_experts": own}, cfg
    )
    assert np.isfinite(metrics["loss"]) and metrics["grad_norm"] > 0
