"""Micro-batch layout (which hidden row predicts which trained token) and the job config."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from pydantic import ValidationError
from swefleet.trainer.config import TrainerConfig
from swefleet.trainer.forward import build_micro_batch, split_samples
from swefleet.trainer.main import parse_job

from swefleet.batch import pack_samples

pytestmark = pytest.mark.unit


def _batch():
    def s(tokens, mask, adv):
        logp = [-0.1 * t if m else 0.0 for t, m in zip(tokens, mask)]
        return {
            "tokens": tokens,
            "loss_mask": mask,
            "inference_logprobs": logp,
            "advantage": adv,
            "policy_version": 0,
        }

    return pack_samples(
        [
            s([11, 12, 13], [False, True, True], 1.0),
            s([21, 22, 23, 24, 25], [False, False, True, False, True], -1.0),
            s([31, 32], [False, True], 0.5),
        ]
    )


def test_split_samples_respects_the_token_budget():
    cu = np.array([0, 3, 8, 10])
    assert list(split_samples(cu, 100, padded=True)) == [(0, 3)]
    assert list(split_samples(cu, 8, padded=False)) == [(0, 2), (2, 3)]
    # padded cost = rows x longest: [3,5] -> 10 > 9, [5,2] -> 10 > 9
    assert list(split_samples(cu, 9, padded=True)) == [(0, 1), (1, 2), (2, 3)]
    assert list(split_samples(cu, 1, padded=False)) == [(0, 1), (1, 2), (2, 3)]


def test_sdpa_layout_predicts_each_trained_token_from_the_previous_row():
    arrays = _batch()
    mb = build_micro_batch(arrays, 0, 3, "sdpa", torch.device("cpu"))
    assert mb.tokens.tolist() == [[11, 12, 13, 0, 0], [21, 22, 23, 24, 25], [31, 32, 0, 0, 0]]
    assert mb.targets.tolist() == [12, 13, 23, 25, 32]
    flat = mb.tokens.flatten()
    # the row before each target holds the token just before it in the same sample
    assert flat[mb.pred_rows].tolist() == [11, 12, 22, 24, 31]
    assert mb.advantages.tolist() == [1.0, 1.0, -1.0, -1.0, 0.5]
    assert mb.logp_inf.tolist() == pytest.approx([-1.2, -1.3, -2.3, -2.5, -3.2])
    assert mb.n_positions == 15


def test_sub_range_of_samples():
    mb = build_micro_batch(_batch(), 1, 3, "sdpa", torch.device("cpu"))
    assert mb.tokens.tolist() == [[21, 22, 23, 24, 25], [31, 32, 0, 0, 0]]
    assert mb.tokens.flatten()[mb.pred_rows].tolist() == [22, 24, 31]
    assert mb.targets.tolist() == [23, 25, 32]


def test_trainer_config_forbids_unknown_fields_and_parses_a_job_file(tmp_path):
    with pytest.raises(ValidationError):
        TrainerConfig(learning_rate=1.0)
    path = tmp_path / "job.toml"
    path.write_text(
        'model = "m"\nbatches_dir = "b"\nweights_dir = "w"\nstart_version = 4\n'
        '[trainer]\nloss = "cispo"\nlr = 0.5\n'
    )
    job = parse_job(["--config", str(path), "--lr", "0.25", "--max-steps", "2"])
    assert (job.start_version, job.max_steps, job.trainer.loss) == (4, 2, "cispo")
    assert job.trainer.lr == 0.25  # the flag wins over the file
    assert job.trainer.eps_high == 0.28
