"""Probability of fixed trajectories under a checkpoint, against transformers' own loss."""

import math

import pytest
import torch
from swefleet.evals.likelihood import mean_probability, sample_probabilities

from swefleet.batch import pack_samples, write_batch

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(0)
    cfg = Qwen3Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    out = tmp_path_factory.mktemp("m")
    Qwen3ForCausalLM(cfg).save_pretrained(out)
    return out


def _sample(tokens, mask):
    return {"tokens": tokens, "loss_mask": mask, "inference_logprobs": [0.0] * len(tokens),
            "advantage": 0.0, "policy_version": 0}


def test_probabilities_match_the_models_own_cross_entropy(model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    samples = [_sample([1, 5, 9, 3, 7, 2], [False, False, True, True, False, True]),
               _sample([4, 4, 8, 6], [False, True, True, True]),
               _sample([2, 3], [False, False])]  # nothing trained: probability 1
    batch = write_batch(tmp_path / "b.npz", pack_samples(samples), {"step": 0})
    probs = sample_probabilities(model_dir, batch)

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    for s, p in zip(samples[:2], probs):
        ids = torch.tensor([s["tokens"]])
        labels = torch.where(torch.tensor([s["loss_mask"]]), ids, torch.full_like(ids, -100))
        with torch.no_grad():
            mean_nll = float(model(ids, labels=labels).loss)
        assert p == pytest.approx(math.exp(-mean_nll * sum(s["loss_mask"][1:])), rel=1e-4)
    assert 0 < probs[0] < 1 and 0 < probs[1] < 1 and probs[2] == 1.0
    assert mean_probability(model_dir, batch) == pytest.approx(sum(probs) / 3)
