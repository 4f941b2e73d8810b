"""Which trained tokens a step's `mismatch_kl` and `staleness_kl` cover: the samples' policy
versions against the version the trainer holds (numpy only, no model)."""

from __future__ import annotations

import numpy as np
import pytest
from swefleet.trainer.step import _version_split, stale_tokens

from swefleet.batch import pack_samples

pytestmark = pytest.mark.unit


def _batch(versions: list[int]) -> dict[str, np.ndarray]:
    return pack_samples([
        {"tokens": [1] * (3 + i), "loss_mask": [False] + [True] * (2 + i),
         "inference_logprobs": [0.0] * (3 + i), "advantage": 1.0, "policy_version": v}
        for i, v in enumerate(versions)
    ])  # fmt: skip


def test_tokens_of_older_samples_are_stale():
    arrays = _batch([2, 1, 2])  # samples of 3, 4 and 5 tokens
    assert stale_tokens(arrays, 2).tolist() == [False] * 3 + [True] * 4 + [False] * 5
    assert stale_tokens(arrays, 3).all()
    with pytest.raises(ValueError, match="newer than the trainer's 1"):
        stale_tokens(arrays, 1)


def test_split_reports_each_kind_over_its_tokens_or_none():
    totals = {"mismatch_kl": 1e-5, "staleness_kl": 0.3}
    assert _version_split(totals, "dapo", 10, 4) == {
        "mismatch_kl": 1e-5, "staleness_kl": 0.3, "stale_token_fraction": 0.4}
    fresh = _version_split({"mismatch_kl": 1e-5, "staleness_kl": 0.0}, "cispo", 10, 0)
    assert fresh["staleness_kl"] is None and fresh["stale_token_fraction"] == 0.0
    assert _version_split(totals, "dapo", 10, 10)["mismatch_kl"] is None
    assert set(_version_split(totals, "sft", 10, 4).values()) == {None}
