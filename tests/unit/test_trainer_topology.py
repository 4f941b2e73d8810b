"""Trainer topology: `trainer.ranks` / `trainer.gpus` validation, the command and environment
`swefleet rl` starts the trainer with, and the export's shard plan."""

from __future__ import annotations

import sys

import pytest
from swefleet.orchestrator.trainer_proc import trainer_command, trainer_env
from swefleet.trainer.config import TrainerConfig
from swefleet.trainer.export import plan_shards, shard_names

from swefleet.app.config import load_config

pytestmark = pytest.mark.unit


def test_gpus_give_one_rank_each_on_cuda():
    cfg = TrainerConfig(gpus=[2, 3])
    assert (cfg.ranks, cfg.device) == (2, "cuda")
    assert TrainerConfig.model_validate(cfg.model_dump()) == cfg  # the job file round trip
    assert TrainerConfig(gpus=[5], ranks=1, device="cuda").ranks == 1
    assert (TrainerConfig().ranks, TrainerConfig().gpus) == (1, [])


@pytest.mark.parametrize("fields, message", [
    ({"gpus": [0, 1], "ranks": 1}, "ranks=1 but gpus=[0, 1]: one rank per GPU"),
    ({"gpus": [0, 1], "ranks": 4}, "ranks=4 but gpus=[0, 1]"),
    ({"gpus": [0], "device": "cpu"}, "gpus=[0] but device='cpu'"),
    ({"gpus": [1, 1]}, "lists a GPU twice"),
    ({"gpus": [-1]}, "greater than or equal to 0"),
    ({"ranks": 0}, "greater than or equal to 1"),
    ({"ranks": 3, "expert_parallel": 2}, "expert_parallel=2 must divide ranks=3"),
    ({"expert_parallel": 2}, "expert_parallel=2 must divide ranks=1"),
    ({"export_shard_mb": 0}, "greater than 0"),
])  # fmt: skip
def test_contradicting_topology_is_one_line(tmp_path, fields, message):
    path = tmp_path / "c.toml"
    path.write_text("[trainer]\n" + "".join(f"{k} = {v!r}\n" for k, v in fields.items()))
    with pytest.raises(ValueError, match="c.toml: trainer") as err:
        load_config(path)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_one_rank_is_one_process_several_are_torchrun(tmp_path):
    job, logs = tmp_path / "job.json", tmp_path / "logs"
    main = ["-m", "swefleet.trainer.main", "--config", str(job)]
    assert trainer_command(TrainerConfig(), job, logs) == [sys.executable, *main]
    cmd = trainer_command(TrainerConfig(ranks=2, expert_parallel=2), job, logs)
    assert cmd[:4] == [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    assert "--nproc-per-node=2" in cmd and f"--log-dir={logs}" in cmd and cmd[-4:] == main


def test_environment_shows_the_gpus_and_keeps_multicast_off():
    env = trainer_env(TrainerConfig(gpus=[3, 1]), {"PATH": "/bin", "NCCL_NVLS_ENABLE": "1"})
    assert env["CUDA_VISIBLE_DEVICES"] == "3,1" and env["PATH"] == "/bin"
    assert env["NCCL_NVLS_ENABLE"] == "1"  # the caller's choice stands
    assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1" and env["NVSHMEM_DISABLE_NVLS"] == "1"
    assert int(env["OMP_NUM_THREADS"]) >= 1
    one = trainer_env(TrainerConfig(), {"CUDA_VISIBLE_DEVICES": "7"})
    assert one["CUDA_VISIBLE_DEVICES"] == "7" and "OMP_NUM_THREADS" not in one
    assert trainer_env(TrainerConfig(ranks=2), {"OMP_NUM_THREADS": "5"})["OMP_NUM_THREADS"] == "5"


def test_shard_plan_bounds_files_and_keeps_order():
    sizes = {"a": 40, "b": 50, "c": 30, "big": 500, "d": 10}
    shards = plan_shards(sizes, 100)
    assert shards == [["a", "b"], ["c"], ["big"], ["d"]]
    assert [n for s in shards for n in s] == list(sizes)
    assert plan_shards(sizes, 10_000) == [list(sizes)]
    assert shard_names(1) == ["model.safetensors"]
    assert shard_names(3)[2] == "model-00003-of-00003.safetensors"

