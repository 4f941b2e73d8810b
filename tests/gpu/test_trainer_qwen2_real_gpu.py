"""A real converted Qwen2 (Qwen2.5-Coder Instruct) in the trainer on CUDA, bf16 autocast: its
log-probs of a fixed chat prompt + answer against transformers' own (bf16, as a server runs it).

Needs `SWEFLEET_REAL_MODEL_DIR`: a converted Hugging Face folder (config.json with model_type
qwen2, safetensors, tokenizer and chat template), e.g. the `hf/` folder `swefleet models pull
qwen2.5-coder-1.5b-instruct` leaves in the model cache. Skipped when unset or without CUDA.

    SWEFLEET_REAL_MODEL_DIR=... .venv/bin/pytest -s tests/gpu/test_trainer_qwen2_real_gpu.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from swefleet.batch import pack_samples

REAL = os.environ.get("SWEFLEET_REAL_MODEL_DIR")
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.skipif(not REAL, reason="SWEFLEET_REAL_MODEL_DIR is not set"),
]
MESSAGES = [
    {"role": "system", "content": "You are a helpful coding assistant."},
    {"role": "user", "content": "Fix this function so that it returns the sum of a and b:\n"
                                "```python\ndef add(a, b):\n    return a - b\n```"},
]
ANSWER = ("The function subtracts instead of adding. Here is the fix:\n"
          "```python\ndef add(a, b):\n    return a + b\n```")


def _chat_ids(model_dir: Path) -> tuple[list[int], list[int]]:
    """(prompt ids from the folder's chat template, answer ids + `<|im_end|>`)."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir)
    text = tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=False)
    prompt = tok.encode(text, add_special_tokens=False)
    end = tok.convert_tokens_to_ids("<|im_end|>")
    answer = tok.encode(ANSWER, add_special_tokens=False) + [end]
    return prompt, answer


def _hf_logprobs(model_dir: Path, ids: list[int], start: int, dtype: torch.dtype) -> np.ndarray:
    """transformers' log-probs of ids[start:] (the model loaded in `dtype`, sdpa, CUDA)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype,
                                                 attn_implementation="sdpa").cuda().eval()
    x = torch.tensor([ids], device="cuda")
    with torch.no_grad():
        logp = torch.log_softmax(model(x).logits[0, start - 1 : -1].float(), -1)
        out = logp.gather(-1, x[0, start:, None])[:, 0].cpu().numpy()
    del model
    torch.cuda.empty_cache()
    return out


def _kl(a: np.ndarray, b: np.ndarray) -> float:
    """Mismatch KL mean(exp(d) - d - 1), d = a - b (the trainer's health signal)."""
    d = a.astype(np.float64) - b.astype(np.float64)
    return float(np.mean(np.exp(d) - d - 1))


def test_real_qwen2_trainer_logprobs_match_transformers_bf16():
    from swefleet.trainer.forward import batch_logprobs
    from swefleet.trainer.titan import load_policy

    model_dir = Path(REAL)
    config = json.loads((model_dir / "config.json").read_text())
    assert config["model_type"] == "qwen2", config["model_type"]
    prompt, answer = _chat_ids(model_dir)
    ids = prompt + answer
    arrays = pack_samples([{
        "tokens": ids, "loss_mask": [False] * len(prompt) + [True] * len(answer),
        "inference_logprobs": [0.0] * len(ids), "advantage": 0.0, "policy_version": 0,
    }])
    policy = load_policy(model_dir, torch.device("cuda"), "varlen")
    assert policy.model.layers["0"].attention.wq.bias is not None
    trainer = batch_logprobs(policy, arrays, autocast_dtype=torch.bfloat16)[len(prompt):]
    del policy
    torch.cuda.empty_cache()
    hf_bf16 = _hf_logprobs(model_dir, ids, len(prompt), torch.bfloat16)
    hf_fp32 = _hf_logprobs(model_dir, ids, len(prompt), torch.float32)
    kl_bf16, kl_fp32 = _kl(trainer, hf_bf16), _kl(trainer, hf_fp32)
    print(f"{model_dir.name}: {len(prompt)} prompt + {len(answer)} answer tokens; "
          f"mean logp trainer {trainer.mean():.4f} hf-bf16 {hf_bf16.mean():.4f} "
          f"hf-fp32 {hf_fp32.mean():.4f}; mismatch KL vs hf-bf16 {kl_bf16:.2e}, "
          f"vs hf-fp32 {kl_fp32:.2e}; max |d| vs bf16 {np.abs(trainer - hf_bf16).max():.4f}")
    assert trainer.mean() > -3.0  # a real model predicts its own kind of answer
    assert kl_bf16 <= 1e-3
