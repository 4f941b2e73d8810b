"""The streamed, sharded HF export from two ranks (gloo): with a small shard bound a published
version is several `model-0000i-of-0000N.safetensors` + `model.safetensors.index.json`, every
tensor equals the trainer's full state dict, and transformers and the embedded engine load it.
Dense (FSDP2) and Qwen3-MoE (experts stacked in torchtitan, one HF tensor per expert; experts
split by expert parallelism over the two ranks)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from swefleet.trainer.export import INDEX_FILE, state_dicts_equal

from swefleet.tinymodel import create_tiny_model
from tests.trainer_ranks import finish, launch_trainer_ranks

pytestmark = pytest.mark.integration
SHARD_BYTES = 200_000  # the tiny models are 0.8-1.3 MB in fp32: 4-7 files


def _read_index(path: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """The index and every tensor of a sharded checkpoint, read through its index."""
    from safetensors.torch import load_file

    index = json.loads((path / INDEX_FILE).read_text())
    tensors: dict[str, torch.Tensor] = {}
    for name in sorted(set(index["weight_map"].values())):
        shard = load_file(str(path / name))
        assert {index["weight_map"][k] for k in shard} == {name}, name
        tensors.update(shard)
    return index, tensors


def _check_files(path: Path, index: dict, tensors: dict[str, torch.Tensor]) -> None:
    files = sorted(p.name for p in path.glob("*.safetensors"))
    n = len(files)
    assert n >= 2 and files == [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]
    assert sorted(set(index["weight_map"].values())) == files
    nbytes = {k: t.numel() * t.element_size() for k, t in tensors.items()}
    assert index["metadata"]["total_size"] == sum(nbytes.values())
    for name in files:
        held = [k for k, f in index["weight_map"].items() if f == name]
        assert len(held) == 1 or sum(nbytes[k] for k in held) <= SHARD_BYTES, name


CASES = {"tiny": 1, "tiny-moe": 2}  # preset: expert parallel degree


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> dict[str, tuple[Path, Path]]:
    """preset -> (source checkpoint, export directory); both presets in one 2-rank launch."""
    work = tmp_path_factory.mktemp("sharded_export")
    jobs, out = [], {}
    for preset, ep in CASES.items():
        source = create_tiny_model(tmp_path_factory.getbasetemp() / f"{preset}-qwen3",
                                   preset=preset)  # fmt: skip
        out[preset] = (source, work / preset)
        jobs.append({"model": str(source), "out": str(work / preset), "expert_parallel": ep})
    (work / "export.json").write_text(json.dumps({"jobs": jobs, "shard_bytes": SHARD_BYTES}))
    finish(launch_trainer_ranks(work / "export.json", module="tests.export_rank",
                                OMP_NUM_THREADS="1"))  # fmt: skip
    return out


@pytest.mark.parametrize("preset", list(CASES))
def test_two_rank_sharded_export_round_trips(preset, exported):
    from safetensors.torch import load_file
    from swefleet.inference.engine.weights import read_weights
    from transformers import AutoModelForCausalLM

    source, out = exported[preset]
    sharded = out / "sharded"
    reference = load_file(str(out / "reference.safetensors"))
    index, tensors = _read_index(sharded)
    _check_files(sharded, index, tensors)
    assert state_dicts_equal(tensors, reference)  # bit-identical to the full gather
    scaled = {k: v * 1.5 for k, v in load_file(str(source / "model.safetensors")).items()}
    assert state_dicts_equal(tensors, scaled)  # ... which is the source, scaled on the ranks
    assert not list(out.glob("*.tmp-*"))
    assert json.loads((sharded / "swefleet_policy.json").read_text())["version"] == 1
    print(preset, json.loads((out / "export_stats.json").read_text()))

    # transformers loads the shards (MoE: converting per-expert tensors into its own layout)
    # like a single file of the reference tensors
    single = out / "single"
    shutil.copytree(sharded, single, ignore=shutil.ignore_patterns("*.safetensors*"))
    shutil.copy(out / "reference.safetensors", single / "model.safetensors")
    model, info = AutoModelForCausalLM.from_pretrained(sharded, dtype=torch.float32,
                                                       output_loading_info=True)  # fmt: skip
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    want = AutoModelForCausalLM.from_pretrained(single, dtype=torch.float32).state_dict()
    assert state_dicts_equal(model.state_dict(), want)
    # the embedded engine's weight update reads the index too
    staged = read_weights(AutoModelForCausalLM.from_pretrained(source), sharded)
    assert state_dicts_equal(staged.tensors, {k: want[k] for k in staged.tensors})
