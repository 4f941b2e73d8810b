"""vLLM launch profiles against vLLM 0.26.0's own source, read with `ast` (vLLM is never imported).

The source comes from the 0.26.0 wheel unpacked by `scripts/fetch_vllm_source.sh` (default
`.cache/vllm-src/0.26.0`, or `SWEFLEET_VLLM_SRC`); without it the source checks skip with that
reason, the pure checks of the profiles still run.

Checked against the source: every `--flag` of every profile (engine flags in
`vllm/engine/arg_utils.py`, server flags in `vllm/entrypoints/openai/cli_args.py`, `--no-X` only
for boolean X), every enumerated value we pass (dtype, quantization, KV dtype, logprobs mode,
offloading backend, connector names, KV roles, offloading spec and tier), the connector JSON
keys, the environment variables, the request fields the fleet client sends and the response
fields it reads (`vllm/entrypoints/openai/completion/protocol.py`), the dev routes of weight
updates, the weight-transfer engine (flag, routes, `init_info`/`update_info` fields, trainer-side
calls, packing rule) and the KV-usage metric name.
"""

from __future__ import annotations

import ast
import json
import os
from functools import cache
from pathlib import Path

import pytest
from swefleet.inference.config import InferenceConfig
from swefleet.inference.disagg import decode_body, prefill_body
from swefleet.inference.fleet_request import request_body
from swefleet.inference.vllm_launch import (
    SERVER_ENV,
    VLLM_VERSION,
    WEIGHT_TRANSFER_CONFIG,
    WORKER_EXTENSION,
    DisaggConfig,
    KVOffloadConfig,
    VLLMConfig,
    disaggregated_profiles,
    emitted_flags,
    kv_transfer_config,
    serve_command,
)
from swefleet.inference.vllm_worker import SwefleetWorkerExtension
from swefleet.inference.weight_sync import init_info

from swefleet.weight_transfer import TransferGroup, UpdateInfo, packed_chunks

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
SRC = Path(os.environ.get("SWEFLEET_VLLM_SRC", ROOT / ".cache" / "vllm-src" / VLLM_VERSION))
needs_src = pytest.mark.skipif(
    not (SRC / "vllm" / "engine" / "arg_utils.py").exists(),
    reason=f"vLLM {VLLM_VERSION} source not at {SRC}: run scripts/fetch_vllm_source.sh",
)

MODEL = "Qwen/Qwen3-30B-A3B"
PROFILES = {
    "default": VLLMConfig(model=MODEL),
    "everything": VLLMConfig(
        model=MODEL,
        served_model_name="policy",
        tensor_parallel_size=4,
        data_parallel_size=2,
        enable_expert_parallel=True,
        enable_eplb=True,
        fp8=True,
        kv_cache_fp8=True,
        yarn_factor=4.0,
        max_num_batched_tokens=16384,
        max_cudagraph_capture_size=64,
        enforce_eager=True,
        return_routed_experts=True,
        api_server_count=4,
        stream_interval=16,
        model_runner="v1",
        engine_start_method="fork",
    ),
    "no_prefix_cache": VLLMConfig(model=MODEL, enable_prefix_caching=False),
    "offload_cpu": VLLMConfig(model=MODEL, kv_offload=KVOffloadConfig(cpu_gib=64)),
    "offload_cpu_disk": VLLMConfig(
        model=MODEL, kv_offload=KVOffloadConfig(cpu_gib=64, disk_path="/nvme/kv")
    ),
    "disagg": VLLMConfig(model=MODEL, disagg=DisaggConfig()),
    "disagg_offload": VLLMConfig(
        model=MODEL,
        disagg=DisaggConfig(kv_buffer_device="cpu"),
        kv_offload=KVOffloadConfig(cpu_gib=32, disk_path="/nvme/kv"),
    ),
}


def argv_of(cfg: VLLMConfig) -> list[str]:
    return serve_command(cfg, 8000, executable="vllm")[0]


def value_of(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


# ---- reading vLLM's source ----


@cache
def tree(rel: str) -> ast.Module:
    return ast.parse((SRC / "vllm" / rel).read_text())


def class_fields(rel: str, name: str) -> dict[str, str]:
    """Annotated fields of class `name` in `rel`: name -> annotation source."""
    for node in ast.walk(tree(rel)):
        if isinstance(node, ast.ClassDef) and node.name == name:
            return {
                n.target.id: ast.unparse(n.annotation)
                for n in node.body
                if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
            }
    raise AssertionError(f"class {name} not in {rel}")


def literal_values(rel: str, name: str) -> set[str]:
    """String values of a module-level `Name = Literal[...]` (nested Literals flattened)."""
    for node in tree(rel).body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == name for t in node.targets
        ):
            return {
                c.value
                for c in ast.walk(node.value)
                if isinstance(c, ast.Constant) and isinstance(c.value, str)
            }
    raise AssertionError(f"{name} not in {rel}")


def call_string_args(rel: str, func: str) -> set[str]:
    """First string argument of every call of `func` (function or method name) in `rel`."""
    out = set()
    for node in ast.walk(tree(rel)):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", None) or getattr(node.func, "id", None)
            if name == func:
                out |= {
                    a.value
                    for a in node.args
                    if isinstance(a, ast.Constant) and isinstance(a.value, str)
                }
    return out


def strings_in(rel: str) -> set[str]:
    return {
        n.value
        for n in ast.walk(tree(rel))
        if isinstance(n, ast.Constant) and isinstance(n.value, str)
    }


@cache
def engine_fields() -> dict[str, str]:
    return class_fields("engine/arg_utils.py", "EngineArgs")


@cache
def frontend_fields() -> dict[str, str]:
    rel = "entrypoints/openai/cli_args.py"
    return {**class_fields(rel, "BaseFrontendArgs"), **class_fields(rel, "FrontendArgs")}


@cache
def known_flags() -> set[str]:
    flags = {f for f in call_string_args("engine/arg_utils.py", "add_argument") if f[:2] == "--"}
    flags |= {f for f in call_string_args("entrypoints/openai/cli_args.py", "add_argument")}
    # frontend flags are generated from the dataclass fields: f"--{key.replace('_', '-')}"
    flags |= {"--" + name.replace("_", "-") for name in frontend_fields()}
    return flags


def flag_ok(flag: str) -> bool:
    if flag in known_flags():
        return True
    if flag.startswith("--no-") and "--" + flag[5:] in known_flags():
        field = flag[5:].replace("-", "_")
        hint = engine_fields().get(field) or frontend_fields().get(field) or ""
        return "bool" in hint and "str" not in hint  # BooleanOptionalAction makes --no-X
    return False


# ---- flags and values ----


@needs_src
def test_source_is_vllm_0_26_0():
    meta = next(SRC.glob("vllm-*.dist-info/METADATA"), None)
    assert meta is not None and f"Version: {VLLM_VERSION}" in meta.read_text()


@needs_src
@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_flag_exists_in_vllm_0_26(profile):
    cfgs = [PROFILES[profile]]
    if PROFILES[profile].disagg:
        cfgs = list(disaggregated_profiles(PROFILES[profile]))
    for cfg in cfgs:
        flags = emitted_flags(argv_of(cfg))
        assert flags, "no flags emitted"
        unknown = [f for f in flags if not flag_ok(f)]
        assert not unknown, f"flags unknown to vLLM {VLLM_VERSION}: {unknown}"


@needs_src
def test_flag_check_can_fail():
    assert not flag_ok("--swap-space")  # gone in 0.26 (it existed in the V0 engine)
    assert not flag_ok("--no-max-model-len")  # not a boolean
    assert flag_ok("--no-enable-prefix-caching")


@needs_src
def test_enumerated_values_exist():
    argv = argv_of(PROFILES["everything"])
    assert value_of(argv, "--dtype") in literal_values("config/model.py", "ModelDType")
    assert value_of(argv, "--logprobs-mode") in literal_values("config/model.py", "LogprobsMode")
    assert value_of(argv, "--quantization") in literal_values(
        "model_executor/layers/quantization/__init__.py", "QuantizationMethods"
    )
    assert value_of(argv, "--kv-cache-dtype") in literal_values("config/cache.py", "CacheDType")
    override = json.loads(value_of(argv, "--hf-overrides"))["rope_parameters"]
    assert override["rope_type"] in strings_in("model_executor/layers/rotary_embedding/__init__.py")
    assert "rope_parameters" in strings_in("transformers_utils/config.py")
    offload = argv_of(PROFILES["offload_cpu"])
    assert value_of(offload, "--kv-offloading-backend") in literal_values(
        "config/cache.py", "KVOffloadingBackend"
    )
    float(value_of(offload, "--kv-offloading-size"))


def connectors_of(cfg: dict) -> list[dict]:
    if cfg["kv_connector"] == "MultiConnector":
        return cfg["kv_connector_extra_config"]["connectors"]
    return [cfg]


@needs_src
@pytest.mark.parametrize("profile", ["offload_cpu_disk", "disagg", "disagg_offload"])
def test_kv_transfer_config_matches_vllm(profile):
    cfg = json.loads(value_of(argv_of(PROFILES[profile]), "--kv-transfer-config"))
    fields = class_fields("config/kv_transfer.py", "KVTransferConfig")
    registered = call_string_args(
        "distributed/kv_transfer/kv_connector/factory.py", "register_connector"
    )
    roles = literal_values("config/kv_transfer.py", "KVProducer") | literal_values(
        "config/kv_transfer.py", "KVConsumer"
    )
    for conn in [cfg, *connectors_of(cfg)]:
        assert set(conn) <= set(fields), set(conn) - set(fields)
        assert conn["kv_connector"] in registered
        assert conn["kv_role"] in roles
    for conn in connectors_of(cfg):
        extra = conn.get("kv_connector_extra_config", {})
        if conn["kv_connector"] != "OffloadingConnector":
            continue
        assert "cpu_bytes_to_use" in strings_in("v1/kv_offload/cpu/spec.py")
        if "spec_name" in extra:
            specs = call_string_args("v1/kv_offload/factory.py", "register_spec")
            assert extra["spec_name"] in specs
            assert {"secondary_tiers", "eviction_policy"} <= strings_in(
                "v1/kv_offload/tiering/spec.py"
            ) | strings_in("v1/kv_offload/cpu/spec.py")
            tiers = call_string_args("v1/kv_offload/tiering/factory.py", "register_tier")
            for tier in extra["secondary_tiers"]:
                assert tier["type"] in tiers
                params = init_params("v1/kv_offload/tiering/fs/manager.py", "FileSystemTierManager")
                assert set(tier) - {"type"} <= params
    if cfg["kv_connector"] == "MultiConnector":
        assert "connectors" in strings_in(
            "distributed/kv_transfer/kv_connector/v1/multi_connector.py"
        )


def init_params(rel: str, cls: str) -> set[str]:
    for node in ast.walk(tree(rel)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == "__init__":
                    return {a.arg for a in item.args.args + item.args.kwonlyargs}
    raise AssertionError(f"{cls}.__init__ not in {rel}")


@needs_src
def test_environment_variables_exist():
    """vLLM's own variables are read by vLLM 0.26; torch's (`FORK_SAFE_ENV`) by this torch."""
    import inspect

    import torch.cuda
    from swefleet.inference.vllm_launch import FORK_SAFE_ENV

    env_names = strings_in("envs.py")
    for cfg in PROFILES.values():
        _, env = serve_command(cfg, 8000, executable="vllm")
        assert set(env) - set(FORK_SAFE_ENV) <= env_names, set(env) - env_names
    assert SERVER_ENV == {"VLLM_SERVER_DEV_MODE": "1"}
    torch_source = inspect.getsource(torch.cuda)
    assert all(f'"{name}"' in torch_source for name in FORK_SAFE_ENV)


# ---- weight updates through the worker extension ----


@needs_src
def test_weight_update_routes_and_worker_hooks_exist():
    assert "/collective_rpc" in call_string_args("entrypoints/serve/dev/rpc/api_router.py", "post")
    rlhf = call_string_args("entrypoints/serve/dev/rlhf/api_router.py", "post")
    assert {"/pause", "/resume"} <= rlhf
    assert {"abort", "keep"} <= literal_values("v1/engine/__init__.py", "PauseMode")
    # dev routes are mounted only with VLLM_SERVER_DEV_MODE
    assert "VLLM_SERVER_DEV_MODE" in ast.unparse(tree("entrypoints/openai/api_server.py"))
    # the extension calls Worker.reload_weights(weights_path=..., is_checkpoint_format=True)
    worker = class_methods("v1/worker/gpu_worker.py", "Worker")
    assert "reload_weights" in worker
    runner = class_methods("v1/worker/gpu_model_runner.py", "GPUModelRunner")
    assert {"weights_path", "is_checkpoint_format"} <= runner["reload_weights"]
    # vLLM asserts that no extension attribute clashes with the worker's
    ours = {a for a in dir(SwefleetWorkerExtension) if not a.startswith("__")}
    bases = set(worker) | set(class_methods("v1/worker/worker_base.py", "WorkerBase"))
    assert not ours & bases
    assert WORKER_EXTENSION == "swefleet.inference.vllm_worker.SwefleetWorkerExtension"


@needs_src
def test_weight_transfer_engine_matches_vllm():
    """Weight sync by broadcast to vLLM (inference/weight_sync.py, trainer/weight_broadcast.py)
    against 0.26.0's NCCL weight-transfer engine: flag, config, routes, request fields, the
    trainer-side calls and the packing rule."""
    argv = argv_of(PROFILES["default"])
    config = json.loads(value_of(argv, "--weight-transfer-config"))
    assert config == WEIGHT_TRANSFER_CONFIG
    assert set(config) <= set(class_fields("config/weight_transfer.py", "WeightTransferConfig"))
    assert config["backend"] in call_string_args(
        "distributed/weight_transfer/factory.py", "register_engine")
    rel = "entrypoints/serve/dev/rlhf/api_router.py"
    assert {"/init_weight_transfer_engine", "/start_weight_update", "/update_weights",
            "/finish_weight_update"} <= call_string_args(rel, "post")
    assert "/get_world_size" in call_string_args(rel, "get")
    assert {"init_info", "update_info"} <= strings_in(rel)  # the body keys the routes read
    group = TransferGroup(master_address="10.0.0.1", master_port=29600, world_size=9)
    sent = init_info("vllm", group, rank_offset=1)
    assert set(sent) == set(class_fields("distributed/weight_transfer/nccl_common.py",
                                         "NCCLWeightTransferInitInfo"))
    engine = "distributed/weight_transfer/nccl_engine.py"
    assert set(UpdateInfo.model_fields) == set(class_fields(engine, "NCCLWeightTransferUpdateInfo"))
    # the trainer side: what NCCLWeightTransferEngine.trainer_init / trainer_send_weights use
    create = class_methods("distributed/utils.py", "StatelessProcessGroup")["create"]
    assert {"host", "port", "rank", "world_size", "store_timeout"} <= create
    pynccl = "distributed/device_communicators/pynccl.py"
    assert {"group", "device"} <= class_methods(pynccl, "PyNcclCommunicator")["__init__"]
    assert "trainer_send_weights" in class_methods(engine, "NCCLWeightTransferEngine")
    assert {"group", "packed", "packed_buffer_size_bytes", "packed_num_buffers"} <= set(
        class_fields(engine, "NCCLTrainerSendWeightsArgs"))
    # packing: a bucket closes once its size exceeds the buffer size (producer and consumer)
    packed = ast.unparse(tree("distributed/weight_transfer/packed_tensor.py"))
    assert "if total_bytes > buffer_size_bytes:" in packed
    assert "if packing_tensor_sizes[buffer_idx] > target_packed_tensor_size:" in packed
    defaults = {n.targets[0].id: eval(ast.unparse(n.value))
                for n in tree("distributed/weight_transfer/packed_tensor.py").body
                if isinstance(n, ast.Assign) and isinstance(n.targets[0], ast.Name)
                and n.targets[0].id.startswith("DEFAULT_PACKED")}
    assert UpdateInfo.model_fields["packed_buffer_size_bytes"].default == defaults[
        "DEFAULT_PACKED_BUFFER_SIZE_BYTES"]
    assert UpdateInfo.model_fields["packed_num_buffers"].default == defaults[
        "DEFAULT_PACKED_NUM_BUFFERS"]


def test_packed_chunks_close_a_bucket_once_it_is_over_the_size():
    assert packed_chunks([4, 4, 4, 4], 8) == [range(3), range(3, 4)]
    assert packed_chunks([10, 1, 1], 8) == [range(1), range(1, 3)]
    assert packed_chunks([], 8) == []


def class_methods(rel: str, cls: str) -> dict[str, set[str]]:
    for node in ast.walk(tree(rel)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            return {
                f.name: {a.arg for a in f.args.args + f.args.kwonlyargs}
                for f in node.body
                if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)
            }
    raise AssertionError(f"{cls} not in {rel}")


def test_worker_extension_reloads_and_reports_version():
    class FakeWorker(SwefleetWorkerExtension):
        def __init__(self):
            self.calls = []

        def reload_weights(self, **kwargs):
            self.calls.append(kwargs)

    w = FakeWorker()
    assert w.policy_version() == 0
    assert w.update_weights_from_path("/ckpt/step-7", "7") == 7  # strings over HTTP
    assert w.calls == [{"weights_path": "/ckpt/step-7", "is_checkpoint_format": True}]
    assert w.policy_version() == 7 and w.swefleet_liveness()["policy_version"] == 7


# ---- the completions protocol the fleet client speaks ----


@needs_src
def test_request_fields_the_client_sends_exist():
    rel = "entrypoints/openai/completion/protocol.py"
    fields = set(class_fields(rel, "CompletionRequest"))
    cfg = InferenceConfig(stop_token_ids=[7], model_name="policy")
    body = request_body(cfg, [1, 2, 3], 16)
    sent = set(body) | {"cache_salt"}
    assert sent <= fields, sent - fields
    assert set(prefill_body(body)) | set(decode_body(body, {"kv_transfer_params": {"a": 1}})) <= (
        fields
    )
    assert "routed_experts_prompt_start" not in fields  # 0.26: SamplingParams only (docs)


@needs_src
def test_response_fields_the_client_reads_exist():
    rel = "entrypoints/openai/completion/protocol.py"
    choice = set(class_fields(rel, "CompletionResponseChoice"))
    assert {"token_ids", "logprobs", "finish_reason", "stop_reason", "routed_experts"} <= choice
    assert "prompt_token_ids" in choice
    assert {"token_logprobs", "tokens", "top_logprobs"} <= set(
        class_fields(rel, "CompletionLogProbs")
    )
    assert {"choices", "usage", "kv_transfer_params"} <= set(
        class_fields(rel, "CompletionResponse")
    )
    usage = class_fields("entrypoints/openai/engine/protocol.py", "UsageInfo")
    assert {"prompt_tokens", "completion_tokens"} <= set(usage)


@needs_src
def test_metric_names_exist():
    names = call_string_args("v1/metrics/loggers.py", "_gauge_cls") | strings_in(
        "v1/metrics/loggers.py"
    )
    assert "vllm:kv_cache_usage_perc" in names
    assert "vllm:gpu_cache_usage_perc" not in names  # the pre-V1 name, still parsed as fallback
    assert {"vllm:num_requests_running", "vllm:num_requests_waiting"} <= names


# ---- the profiles themselves (no source needed) ----


def test_default_profile_has_the_rl_essentials():
    argv = argv_of(PROFILES["default"])
    assert argv[:3] == ["vllm", "serve", MODEL]
    assert value_of(argv, "--max-model-len") == "131072"
    assert value_of(argv, "--worker-extension-cls") == WORKER_EXTENSION
    assert value_of(argv, "--logprobs-mode") == "raw_logprobs"
    assert "--enable-prefix-caching" in argv and value_of(argv, "--host") == "127.0.0.1"
    assert "--kv-transfer-config" not in argv and "--quantization" not in argv


def test_offload_profiles():
    cpu = argv_of(PROFILES["offload_cpu"])
    assert value_of(cpu, "--kv-offloading-size") == "64.0"
    disk = json.loads(value_of(argv_of(PROFILES["offload_cpu_disk"]), "--kv-transfer-config"))
    extra = disk["kv_connector_extra_config"]
    assert disk["kv_connector"] == "OffloadingConnector"
    assert extra["cpu_bytes_to_use"] == 64 << 30
    assert extra["secondary_tiers"][0] == {
        "type": "fs",
        "root_dir": "/nvme/kv",
        "n_read_threads": 16,
        "n_write_threads": 16,
    }
    both = kv_transfer_config(PROFILES["disagg_offload"])
    assert [c["kv_connector"] for c in both["kv_connector_extra_config"]["connectors"]] == [
        "NixlConnector",
        "OffloadingConnector",
    ]
    with pytest.raises(ValueError, match="cpu_gib"):
        KVOffloadConfig(disk_path="/nvme/kv")


def test_disaggregated_pools_and_routing_bodies():
    prefill, decode = disaggregated_profiles(PROFILES["disagg"])
    for cfg in (prefill, decode):
        argv, env = serve_command(cfg, 8100, index=3, executable="vllm")
        assert json.loads(value_of(argv, "--kv-transfer-config"))["kv_connector"] == "NixlConnector"
        assert env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5603"
    body = request_body(InferenceConfig(), [1, 2, 3], 64)
    p = prefill_body(body)
    assert p["max_tokens"] == 1 and p["kv_transfer_params"]["do_remote_decode"] is True
    assert body["max_tokens"] == 64 and "kv_transfer_params" not in body
    d = decode_body(body, {"kv_transfer_params": {"remote_engine_id": "e1"}})
    assert d["kv_transfer_params"] == {"remote_engine_id": "e1"} and d["max_tokens"] == 64
    with pytest.raises(ValueError, match="kv_transfer_params"):
        decode_body(body, {})
    with pytest.raises(ValueError, match="disagg"):
        disaggregated_profiles(PROFILES["default"])


def test_invalid_combinations_refused():
    with pytest.raises(ValueError, match="expert_parallel"):
        VLLMConfig(model=MODEL, enable_eplb=True)
    with pytest.raises(ValueError, match="routed_experts"):
        VLLMConfig(model=MODEL, return_routed_experts=True, kv_offload=KVOffloadConfig(cpu_gib=8))
    with pytest.raises(ValueError):
        VLLMConfig(model=MODEL, unknown_field=1)
