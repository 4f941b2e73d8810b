"""Expert parallelism: the configuration checks, and the CPU token permutation EP relies on
(the two-rank training run is tests/integration/test_trainer_ep.py)."""

from __future__ import annotations

import json

import pytest
import torch
from pydantic import ValidationError
from swefleet.trainer import titan
from swefleet.trainer.config import TrainerConfig

pytestmark = pytest.mark.unit

MOE = {"model_type": "qwen3_moe", "num_experts": 8}


def test_expert_parallel_fits_moe_models_ranks_and_experts():
    titan.check_expert_parallel(MOE, 1, 1)
    titan.check_expert_parallel({"model_type": "qwen3"}, 1, 4)  # dense without EP: fine
    titan.check_expert_parallel(MOE, 2, 2)
    titan.check_expert_parallel(MOE, 2, 4)  # experts FSDP-sharded over the other 2 ranks
    titan.check_expert_parallel(MOE, 8, 8)
    with pytest.raises(ValueError, match="needs a MoE model .* is dense"):
        titan.check_expert_parallel({"model_type": "qwen3"}, 2, 2)
    with pytest.raises(ValueError, match=r"must divide the number of ranks \(3\)"):
        titan.check_expert_parallel(MOE, 2, 3)
    with pytest.raises(ValueError, match=r"must divide the number of ranks \(1\)"):
        titan.check_expert_parallel(MOE, 2, 1)
    with pytest.raises(ValueError, match=r"must divide the number of experts \(6\)"):
        titan.check_expert_parallel({**MOE, "num_experts": 6}, 4, 4)


def test_load_policy_checks_expert_parallel_before_building(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    with pytest.raises(ValueError, match="is dense"):
        titan.load_policy(tmp_path, torch.device("cpu"), "sdpa", dp_size=2, expert_parallel=2)


def test_config_field():
    assert TrainerConfig().expert_parallel == 1
    assert TrainerConfig(expert_parallel=4, ranks=4).expert_parallel == 4
    with pytest.raises(ValidationError):
        TrainerConfig(expert_parallel=0)
    with pytest.raises(ValidationError, match="must divide ranks"):
        TrainerConfig(expert_parallel=4)  # one rank cannot split experts four ways


def test_cpu_permutation_groups_received_tokens_by_local_expert():
    """After EP's all-to-all a rank holds, per source rank, its local experts' tokens; the
    permutation regroups them by expert (padded to the alignment) and inverts exactly."""
    from torchtitan.models.moe.utils import TOKEN_GROUP_ALIGN_SIZE_M as align
    from torchtitan.models.moe.utils import _permute, _unpermute

    titan._cpu_permute_shim()
    titan._cpu_permute_shim()  # idempotent
    x = torch.arange(1, 7, dtype=torch.float32)[:, None].repeat(1, 3)  # rows 1..6
    # from rank 0: 2 tokens for local expert 0, 1 for expert 1; from rank 1: 3 and 0
    counts = torch.tensor([2, 1, 3, 0])
    shape, out, indices, sizes = _permute(x, counts, 2, 2)
    assert sizes.tolist() == [align, align]
    assert out[:, 0].tolist()[: 2 * align] == (
        [1, 2, 4, 5, 6] + [0] * (align - 5) + [3] + [0] * (align - 1)
    )
    assert not out[2 * align :].any()
    torch.testing.assert_close(_unpermute(out, shape, indices), x)
