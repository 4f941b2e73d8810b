"""Inference topology from one config (`swefleet.app.topology`, `InferenceConfig`): what each role
gets, and every setting that cannot take effect is a one-line config error."""

from __future__ import annotations

import pytest
from swefleet.inference.config import InferenceConfig
from swefleet.inference.vllm_launch import (
    LAUNCH_ENV_DEFAULTS,
    VLLMLaunch,
    launch_env,
    launch_profile,
    missing_executable,
    serve_command,
)

from swefleet.app.cli import build_parser, main
from swefleet.app.config import RunConfig, load_config
from swefleet.app.topology import resolve_topology

pytestmark = pytest.mark.unit


def topo(inference: dict, trainer: dict | None = None):
    return resolve_topology(RunConfig.model_validate({"inference": inference,
                                                      "trainer": trainer or {"device": "cpu"}}))


def test_default_is_one_embedded_cpu_server():
    t = topo({})
    assert t.kind == "embedded" and t.launched and len(t.servers) == 1
    s = t.servers[0]
    assert (s.gpus, s.device, s.port, s.gpu_memory_fraction) == ((), "cpu", 0, None)
    assert t.shared_gpus == () and t.trainer_gpus == () and t.trainer_ranks == 1


def test_auto_is_external_with_servers():
    t = topo({"servers": ["http://127.0.0.1:8000/", "http://127.0.0.1:8001"]})
    assert t.kind == "external" and not t.launched
    assert [s.url for s in t.servers] == ["http://127.0.0.1:8000", "http://127.0.0.1:8001"]


def test_embedded_servers_get_one_gpu_each_and_run_on_cuda():
    t = topo({"kind": "embedded", "num_servers": 2, "gpus": [2, 5], "port": 9000},
             {"gpus": [0, 1]})
    assert [s.gpus for s in t.servers] == [(2,), (5,)]
    assert [s.device for s in t.servers] == ["cuda", "cuda"]
    assert [s.port for s in t.servers] == [9000, 9001]
    assert [s.gpu_memory_fraction for s in t.servers] == [0.9, 0.9]  # GPUs of their own
    assert t.trainer_gpus == (0, 1) and t.trainer_ranks == 2 and t.shared_gpus == ()


def test_vllm_servers_get_tp_x_dp_gpus_and_the_vllm_api():
    cfg = InferenceConfig(kind="vllm", num_servers=2, gpus=[0, 1, 2, 3],
                          vllm=VLLMLaunch(tensor_parallel_size=2))
    assert cfg.gpus_per_server == 2 and cfg.server_api == "vllm" and cfg.device == "cuda"
    t = topo(cfg.model_dump(exclude_unset=True), {"gpus": [4]})
    assert [s.gpus for s in t.servers] == [(0, 1), (2, 3)]


def test_one_gpu_shared_by_both_roles_defaults_to_a_smaller_share():
    assert topo({"gpus": [0]}, {"gpus": [0]}).servers[0].gpu_memory_fraction == 0.35
    assert topo({"gpus": [0], "gpu_memory_fraction": 0.5},
                {"gpus": [0]}).servers[0].gpu_memory_fraction == 0.5
    # no gpus: the device the roles use; the trainer's cuda/auto ranks are cuda:0..
    t = topo({"device": "cuda"}, {"device": "auto"})
    assert t.shared_gpus == (0,) and t.servers[0].gpu_memory_fraction == 0.35
    assert topo({"device": "cuda:1"}, {"device": "auto"}).shared_gpus == ()
    assert topo({"kind": "vllm"}, {"gpus": [0]}).servers[0].gpu_memory_fraction == 0.35


def test_a_dumped_config_resolves_to_the_same_topology():
    data = {"inference": {"kind": "vllm", "gpus": [0, 1], "num_servers": 2},
            "trainer": {"gpus": [2]}}
    cfg = RunConfig.model_validate(data)
    again = RunConfig.model_validate(cfg.model_dump(mode="json"))
    assert resolve_topology(again) == resolve_topology(cfg)


BAD = [
    ({"kind": "embedded", "servers": ["http://h:1"]}, None, "starts its own"),
    ({"kind": "vllm", "servers": ["http://h:1"]}, None, "starts its own"),
    ({"servers": ["http://h:1"], "num_servers": 2}, None, "kind='external' uses the 1"),
    ({"kind": "external"}, None, "needs servers"),
    ({"servers": ["http://h:1"], "gpus": [0]}, None, "launches none"),
    ({"servers": ["http://h:1"], "gpu_memory_fraction": 0.5}, None, "launches none"),
    ({"servers": ["http://h:1"], "gpus_per_server": 2}, None, "launches none"),
    ({"num_servers": 2, "gpus": [0]}, None, "num_servers x gpus_per_server = 2 x 1"),
    ({"num_servers": 2, "gpus": [1, 1]}, None, "lists a GPU twice"),
    ({"gpus_per_server": 2, "gpus": [0, 1]}, None, "an embedded server uses 1 GPU"),
    ({"device": "cuda", "num_servers": 2}, None, "set gpus, one GPU per server"),
    ({"device": "cpu", "gpus": [0]}, None, "device='cpu' with gpus=[0]"),
    ({"device": "cuda:1", "gpus": [0]}, None, "device='cuda:1' with gpus=[0]"),
    ({"gpu_memory_fraction": 0.5}, None, "with device='cpu'"),
    ({"vllm": {"fp8": True}}, None, "inference.vllm is for kind='vllm'"),
    ({"server_api": "vllm"}, None, "embedded engine speaks 'swefleet'"),
    ({"kind": "vllm", "server_api": "swefleet"}, None, "vLLM servers speak 'vllm'"),
    ({"kind": "vllm", "device": "cpu"}, None, "vLLM servers run on GPUs"),
    ({"kind": "vllm", "num_servers": 2}, None, "need gpus"),
    ({"kind": "vllm", "gpus_per_server": 1, "vllm": {"tensor_parallel_size": 2}}, None,
     "data_parallel_size = 2"),
    ({"kind": "vllm", "max_batch_size": 8}, None, "set inference.vllm.max_num_seqs"),
    ({"kind": "vllm", "kv_mode": "static"}, None, "kv_mode is an embedded engine setting"),
    ({"num_servers": 2, "gpus": [0, 1]}, {"gpus": [1]}, "overlap on [1]"),
    ({"kind": "vllm", "vllm": {"tensor_parallel_size": 2}}, {"gpus": [0]}, "overlap on [0]"),
    ({"gpus": [0]}, {"gpus": [0, 1]}, "overlap on [0]"),
    ({"gpus": [0], "gpu_memory_fraction": 0.7}, {"gpus": [0]}, "at most 0.6"),
]


@pytest.mark.parametrize("inference, trainer, message", BAD)
def test_settings_that_cannot_take_effect_are_one_line_errors(tmp_path, inference, trainer,
                                                              message):
    path = tmp_path / "run.toml"
    path.write_text("")
    sets = [f"inference.{k}={_toml(v)}" for k, v in inference.items()]
    sets += [f"trainer.{k}={_toml(v)}" for k, v in (trainer or {"device": "cpu"}).items()]
    with pytest.raises(ValueError) as caught:
        load_config(path, sets)
    text = str(caught.value)
    assert message in text and "\n" not in text and text.startswith(str(path))


def _toml(value) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return str(value)


def test_cli_config_error_is_one_line_and_exit_2(tmp_path, capsys):
    path = tmp_path / "run.toml"
    path.write_text('[inference]\nkind = "vllm"\nnum_servers = 2\n')
    assert main(["rl", "--config", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "need gpus" in err and str(path) in err


def test_server_flags_are_repeatable_and_make_the_fleet_external(tmp_path):
    args = build_parser().parse_args(["rl", "--config", "x.toml", "--server", "http://a:1",
                                      "--server", "http://b:2"])
    assert args.server == ["http://a:1", "http://b:2"]
    ev = build_parser().parse_args(["eval", "--tasks", "t", "--output-dir", "o",
                                    "--server", "http://a:1", "--server", "http://b:2"])
    assert ev.server == ["http://a:1", "http://b:2"]
    path = tmp_path / "run.toml"
    path.write_text('[inference]\nkind = "embedded"\nservers = []\n')
    cfg = load_config(path, servers=args.server)
    assert cfg.inference.resolved_kind == "external"
    assert [s.url for s in resolve_topology(cfg).servers] == args.server
    assert load_config("", servers=["http://a:1"]).inference.servers == ["http://a:1"]


def test_launched_vllm_command_and_environment(monkeypatch):
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")  # the environment wins over the defaults
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "7")
    launch = VLLMLaunch(tensor_parallel_size=2, env={"VLLM_USE_FLASHINFER_SAMPLER": "1"})
    profile = launch_profile(launch, "/w/v000003", served_model_name="policy", host="127.0.0.1",
                             gpu_memory_utilization=0.35)
    argv, profile_env = serve_command(profile, 8123, executable="/opt/vllm")
    assert argv[:3] == ["/opt/vllm", "serve", "/w/v000003"]
    for flag, value in [("--port", "8123"), ("--served-model-name", "policy"),
                        ("--tensor-parallel-size", "2"), ("--gpu-memory-utilization", "0.35")]:
        assert argv[argv.index(flag) + 1] == value
    env = launch_env(profile_env, launch.env, (2, 3))
    assert env["CUDA_VISIBLE_DEVICES"] == "2,3" and env["VLLM_SERVER_DEV_MODE"] == "1"
    assert env["NCCL_NVLS_ENABLE"] == "1" and env["VLLM_USE_FLASHINFER_SAMPLER"] == "1"
    assert env["VLLM_NO_USAGE_STATS"] == LAUNCH_ENV_DEFAULTS["VLLM_NO_USAGE_STATS"]
    assert launch_env({}, {}, ())["CUDA_VISIBLE_DEVICES"] == "7"  # no gpus: inherited


def test_servers_keep_bytecode_where_the_environment_forbids_writing_it(tmp_path, monkeypatch):
    """`bytecode_cache = "auto"` under PYTHONDONTWRITEBYTECODE: the server's Python compiles a
    module once into the cache and later starts reuse it; without the variable: no change."""
    import subprocess
    import sys

    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "served_module.py").write_text("VALUE = 7\n")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    env = launch_env({}, {"PYTHONPATH": str(tmp_path / "src")}, (), "auto")
    assert "PYTHONDONTWRITEBYTECODE" not in env
    cache = tmp_path / "home" / ".cache" / "swefleet" / "pycache"
    assert env["PYTHONPYCACHEPREFIX"] == str(cache)
    subprocess.run([sys.executable, "-c", "import served_module"], env=env, check=True)
    assert list(cache.rglob("served_module*.pyc"))  # compiled once, kept for the next start
    assert not (tmp_path / "src" / "__pycache__").exists()  # nothing next to the sources
    assert "PYTHONPYCACHEPREFIX" not in launch_env({}, {}, (), "")  # "": never
    monkeypatch.delenv("PYTHONDONTWRITEBYTECODE")
    monkeypatch.delenv("PYTHONPYCACHEPREFIX", raising=False)
    assert "PYTHONPYCACHEPREFIX" not in launch_env({}, {}, (), "auto")  # bytecode is written
    assert launch_env({}, {}, (), "/c")["PYTHONPYCACHEPREFIX"] == "/c"


def test_missing_vllm_is_one_line(tmp_path):
    message = missing_executable(str(tmp_path / "no-vllm"))
    assert message.startswith("kind='vllm' needs vLLM 0.26.0 installed")
    assert "pip install 'swefleet[vllm]'" in message and "\n" not in message
    script = tmp_path / "vllm"
    script.write_text("#!/bin/sh\n")
    script.chmod(0o755)
    assert missing_executable(str(script)) is None


def test_model_runner_choice_reaches_the_server_environment():
    """`model_runner`: `auto` leaves vLLM's choice alone; `v1`/`v2` set the variable vLLM reads
    (its name is checked against vLLM's own `envs.py` in test_inference_vllm_args.py)."""
    for choice, value in [("auto", None), ("v1", "0"), ("v2", "1")]:
        profile = launch_profile(VLLMLaunch(model_runner=choice), "/m", served_model_name="p",
                                 host="127.0.0.1", gpu_memory_utilization=0.3)
        _, profile_env = serve_command(profile, 8123, executable="/opt/vllm")
        assert profile_env.get("VLLM_USE_V2_MODEL_RUNNER") == value


def test_engine_start_method_reaches_the_server_environment():
    """`spawn` leaves the CLI's default (it sets the variable only when unset); `fork` sets it."""
    for choice, value in [("spawn", None), ("fork", "fork")]:
        profile = launch_profile(VLLMLaunch(engine_start_method=choice), "/m",
                                 served_model_name="p", host="127.0.0.1",
                                 gpu_memory_utilization=0.3)
        _, profile_env = serve_command(profile, 8123, executable="/opt/vllm")
        assert profile_env.get("VLLM_WORKER_MULTIPROC_METHOD") == value
        # a fork needs torch's availability check by NVML (the runtime's poisons fork)
        assert (profile_env.get("PYTORCH_NVML_BASED_CUDA_CHECK") == "1") == (choice == "fork")
