"""How likely a checkpoint is to reproduce fixed trajectories, token for token.

For each sample of a packed batch file (`swefleet/batch.py`; e.g. the first SFT batch: the
demonstrations), the probability of its trained (model) tokens given everything before them,
at temperature 1: exp(sum of their log-probabilities). Its mean over samples is a noise-free
view of what a policy learned on those tasks (a sampled reward of n episodes has a standard
error of about sqrt(p (1 - p) / n)); `swefleet demo` prints it for the SFT checkpoint and the
final RL one. The model runs through Hugging Face transformers on the CPU, one sample at a
time: meant for the small models of the demo and the tests.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path


def sample_probabilities(model_dir: str | Path, batch_file: str | Path) -> list[float]:
    """P(trained tokens | context) of each sample of `batch_file` under `model_dir`."""
    import torch
    from transformers import AutoModelForCausalLM

    from swefleet.batch import read_batch

    arrays, _ = read_batch(batch_file)
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32).eval()
    bounds = arrays["cu_seqlens"].tolist()
    out = []
    with torch.no_grad():
        for start, end in itertools.pairwise(bounds):
            tokens = torch.as_tensor(arrays["tokens"][start:end], dtype=torch.long)
            trained = torch.as_tensor(arrays["loss_mask"][start:end], dtype=torch.bool)[1:]
            logp = torch.log_softmax(model(tokens[None]).logits[0, :-1].float(), dim=-1)
            token_logp = logp.gather(1, tokens[1:, None])[:, 0]
            out.append(math.exp(float(token_logp[trained].sum())))
    return out


def mean_probability(model_dir: str | Path, batch_file: str | Path) -> float:
    """Mean over the samples of `sample_probabilities`."""
    probs = sample_probabilities(model_dir, batch_file)
    if not probs:
        raise ValueError(f"{batch_file}: no samples")
    return sum(probs) / len(probs)
