"""vLLM (0.26.0) production launch profiles: a typed config -> `vllm serve` arguments + environment.

    cfg = VLLMConfig(model="Qwen/Qwen3-30B-A3B", tensor_parallel_size=4, fp8=True)
    argv, env = serve_command(cfg, port=8000)          # ["vllm", "serve", MODEL, "--host", ...]
    prefill, decode = disaggregated_profiles(cfg)      # two pools joined by a NIXL KV connector

Every flag emitted here exists in vLLM 0.26.0's argument parser: `tests/unit/
test_inference_vllm_args.py` parses `vllm/engine/arg_utils.py` and
`vllm/entrypoints/openai/cli_args.py` of the 0.26.0 wheel with `ast` (no vLLM import) and
checks every flag and every enumerated value of every profile below (`scripts/
fetch_vllm_source.sh` fetches the source). What is and is not verified: docs/vllm.md.

Mapping of the features (0.26.0 names):

- parallelism: `--tensor-parallel-size`, `--data-parallel-size`, `--enable-expert-parallel`
  (MoE experts sharded over TP x DP ranks instead of TP-sliced), `--enable-eplb`;
- FP8: `--quantization fp8` (online dynamic FP8 weights of a bf16 checkpoint; leave it unset
  for checkpoints that are already FP8) and `--kv-cache-dtype fp8`;
- prefix caching: `--enable-prefix-caching` / `--no-enable-prefix-caching`; weight versions are
  kept apart per request with `cache_salt` (fleet client), not by resetting the cache;
- KV offloading GPU -> CPU: `--kv-offloading-size GiB --kv-offloading-backend native`, which
  vLLM turns into an `OffloadingConnector` with `cpu_bytes_to_use`. GPU -> CPU -> disk: an
  explicit `--kv-transfer-config` with `OffloadingConnector` + `spec_name:
  TieringOffloadingSpec` and a `secondary_tiers: [{"type": "fs", "root_dir": ...}]` tier.
  (`--swap-space` no longer exists in 0.26; `--cpu-offload-gb` offloads *weights*, not KV.)
- disaggregated prefill/decode: both pools run `NixlConnector` (`kv_role: kv_both`); routing is
  per phase (`inference/disagg.py`). With offloading too, a `MultiConnector` holds both;
- `--max-model-len` (default 131072; beyond the model's native window set `yarn_factor`, which
  becomes `--hf-overrides {"rope_parameters": {...yarn...}}`);
- router replay: `--enable-return-routed-experts` (choices carry `routed_experts`);
- weights: `--worker-extension-cls swefleet.inference.vllm_worker.SwefleetWorkerExtension` and
  `VLLM_SERVER_DEV_MODE=1`, which mounts vLLM's own `/collective_rpc`, `/pause`, `/resume`;
  the fleet client calls `update_weights_from_path(path, version)` through `/collective_rpc`;
  `--weight-transfer-config {"backend":"nccl"}` builds vLLM's NCCL weight-transfer engine on every
  worker (its `/init_weight_transfer_engine`, `/start_weight_update`, `/update_weights`,
  `/finish_weight_update` routes: weight sync by broadcast, `inference/weight_sync.py`).

Light module: pydantic only.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

VLLM_VERSION = "0.26.0"
WORKER_EXTENSION = "swefleet.inference.vllm_worker.SwefleetWorkerExtension"
#: `--weight-transfer-config` of every profile: vLLM's NCCL weight-transfer engine
WEIGHT_TRANSFER_CONFIG = {"backend": "nccl"}
#: environment every profile needs: the dev routes (/collective_rpc, /pause, /resume)
SERVER_ENV = {"VLLM_SERVER_DEV_MODE": "1"}
#: torch's CUDA availability check by NVML: `torch.cuda.is_available()` otherwise asks the CUDA
#: runtime, which poisons fork without initialising CUDA (a forked engine core then fails with
#: "Cannot re-initialize CUDA in forked subprocess"); torchao calls it while importing.
FORK_SAFE_ENV = {"PYTORCH_NVML_BASED_CUDA_CHECK": "1"}
#: defaults of every server a run launches (the environment or `inference.vllm.env` may override):
#: no NVLink multicast (NVLS/symmetric memory), no FlashInfer sampler, no usage reporting
LAUNCH_ENV_DEFAULTS = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
    "VLLM_USE_FLASHINFER_SAMPLER": "0",
    "TVM_FFI_DISABLE_TORCH_C_DLPACK": "1",
    "VLLM_NO_USAGE_STATS": "1",
}


class KVOffloadConfig(BaseModel):
    """KV cache offloading below GPU memory (prefix-cache blocks evicted from the GPU)."""

    model_config = ConfigDict(extra="forbid")

    cpu_gib: float = Field(0.0, ge=0)
    """CPU buffer for offloaded KV blocks in GiB (summed over TP ranks); 0: no offloading."""
    disk_path: str = ""
    """Directory for a third tier on disk (vLLM's `fs` secondary tier under
    `TieringOffloadingSpec`); empty: GPU -> CPU only. Needs `cpu_gib` > 0."""
    disk_io_threads: int = Field(16, ge=1)
    """Read threads and write threads of the disk tier (each)."""
    eviction_policy: Literal["lru", "arc"] = "lru"
    """Eviction policy of the CPU tier."""

    @model_validator(mode="after")
    def _disk_needs_cpu(self) -> KVOffloadConfig:
        if self.disk_path and not self.cpu_gib:
            raise ValueError("kv_offload.disk_path needs kv_offload.cpu_gib > 0 (CPU is tier 1)")
        return self

    @property
    def enabled(self) -> bool:
        return self.cpu_gib > 0


class DisaggConfig(BaseModel):
    """Disaggregated prefill/decode: two pools of servers joined by a KV connector."""

    model_config = ConfigDict(extra="forbid")

    connector: Literal["NixlConnector"] = "NixlConnector"
    """KV connector moving prefilled blocks from the prefill pool to the decode pool."""
    kv_buffer_device: Literal["cuda", "cpu"] = "cuda"
    """Where the connector stages KV blocks (`cpu` when the NICs cannot read GPU memory)."""
    prefill_servers: int = Field(1, ge=1)
    """Servers in the prefill pool."""
    decode_servers: int = Field(1, ge=1)
    """Servers in the decode pool."""
    side_channel_base_port: int = Field(5600, ge=1024, le=65000)
    """`VLLM_NIXL_SIDE_CHANNEL_PORT` of the first server; each next server takes the next one."""


class VLLMEngineArgs(BaseModel):
    """Engine settings of a vLLM server, shared by a standalone profile (`VLLMConfig`) and the
    servers a run launches (`VLLMLaunch`, `inference.vllm`)."""

    model_config = ConfigDict(extra="forbid")

    tensor_parallel_size: int = Field(1, ge=1)
    """GPUs one model replica is sliced over."""
    data_parallel_size: int = Field(1, ge=1)
    """Replicas inside one server (vLLM balances requests over them)."""
    enable_expert_parallel: bool = False
    """Shard MoE experts over the TP x DP ranks (EP) instead of slicing each expert by TP."""
    enable_eplb: bool = False
    """Expert-parallel load balancing (replicates hot experts); needs expert parallel."""
    dtype: Literal["auto", "bfloat16", "float16"] = "bfloat16"
    """Activation/weight dtype of unquantized layers."""
    fp8: bool = False
    """FP8 weights (`--quantization fp8`, dynamic per-tensor scales) for a bf16 checkpoint;
    leave False for checkpoints already stored in FP8 (vLLM reads their quantization_config)."""
    kv_cache_fp8: bool = False
    """FP8 KV cache (`--kv-cache-dtype fp8`): twice the cached tokens, small logprob drift."""
    enable_prefix_caching: bool = True
    """Reuse KV blocks of shared prefixes (multi-turn episodes, GRPO groups)."""
    max_model_len: int = Field(131072, ge=1)
    """Longest prompt + completion one request may have."""
    yarn_factor: float | None = Field(None, gt=1)
    """YaRN rope scaling factor, for `max_model_len` beyond the model's native window
    (Qwen3: factor 4.0 over 32768 for 131072); None: no override."""
    yarn_original_max_position_embeddings: int = Field(32768, ge=1)
    """Native window YaRN scales from."""
    max_num_seqs: int = Field(512, ge=1)
    """Most sequences scheduled in one step."""
    max_num_batched_tokens: int | None = Field(None, ge=1)
    """Token budget of one step (chunked prefill); None: vLLM's default."""
    max_cudagraph_capture_size: int | None = Field(None, ge=1)
    """Largest batch vLLM captures a CUDA graph for (`--max-cudagraph-capture-size`); None:
    vLLM's default, min(2 x `max_num_seqs`, 512) (51 batch sizes at 512). Every start and every
    restart captures each size again, so a server that never runs more than N sequences at
    once starts sooner with N here (and `max_num_seqs` = N)."""
    enforce_eager: bool = False
    """Disable CUDA graphs / torch.compile (debugging only)."""
    return_routed_experts: bool = False
    """Return each token's routed experts in `choices[i].routed_experts` (router replay, R3)."""
    max_logprobs: int = Field(20, ge=0)
    """Largest `logprobs` a request may ask for."""
    api_server_count: int = Field(1, ge=1)
    """HTTP front-end processes of one server (`--api-server-count`): each parses requests and
    builds responses (per-token logprobs) for its share of the connections, in parallel with the
    others and with the engine core; 1: vLLM's single API process."""
    stream_interval: int = Field(1, ge=1)
    """Tokens per streamed chunk (`--stream-interval`): fewer, larger chunks when the fleet
    streams (`inference.first_token_timeout_s`); the first token is still sent at once."""
    model_runner: Literal["auto", "v1", "v2"] = "auto"
    """vLLM's GPU model runner (`VLLM_USE_V2_MODEL_RUNNER`): `auto`, vLLM's choice (V2 for
    dense models); `v1`/`v2` to force one. V2 JIT-compiles its Triton kernels after the CUDA
    graphs are captured at every start (15 s on one H200 for the 0.6B preset), V1 has no such
    step: a restart took 3-5 s less with V1 (docs/benchmarks.md, "Restart of a killed vLLM
    server")."""
    engine_start_method: Literal["spawn", "fork"] = "spawn"
    """How `vllm serve` starts its engine-core process (`VLLM_WORKER_MULTIPROC_METHOD`):
    `spawn`, the CLI's default, imports vLLM again in the new process (13-16 s of a restart on
    one H200); `fork` starts it from the server process, which has imported vLLM already, and
    sets `PYTORCH_NVML_BASED_CUDA_CHECK=1` (torch's availability check by NVML: one through the
    CUDA runtime makes a forked core fail with "Cannot re-initialize CUDA in forked
    subprocess"). vLLM falls back to `spawn` (a warning in the server log) when CUDA is
    initialised in the server process, which importing torchao does when it is installed next
    to vLLM (swefleet's float8 training installs it); a standby server
    (`inference.standby_servers`) imports without CUDA, so the server it becomes forks its
    core. With `api_server_count` > 1 the API server processes are spawned either way and vLLM
    starts the core only once they are up, so the fork shortens no restart there
    (docs/benchmarks.md, "Restart of a killed vLLM server")."""
    seed: int = 0
    """Engine seed (per-request seeds still take precedence)."""
    kv_offload: KVOffloadConfig = Field(default_factory=KVOffloadConfig)
    """KV offloading GPU -> CPU (-> disk)."""
    extra_args: list[str] = Field(default_factory=list)
    """Appended verbatim (unverified) after the generated arguments."""

    @model_validator(mode="after")
    def _engine_checks(self) -> VLLMEngineArgs:
        if self.enable_eplb and not self.enable_expert_parallel:
            raise ValueError("enable_eplb needs enable_expert_parallel")
        if self.return_routed_experts and self.kv_offload.enabled:
            # external KV hits carry no routing decisions (prime-rl rejects the same combination)
            raise ValueError("return_routed_experts is incompatible with kv_offload and disagg")
        return self

    @property
    def gpus_per_server(self) -> int:
        """GPUs one server occupies: TP x DP."""
        return self.tensor_parallel_size * self.data_parallel_size


class VLLMConfig(VLLMEngineArgs):
    """One vLLM server (or one pool of identical servers) of the rollout fleet."""

    model: str
    """HF repo id or local checkpoint directory."""
    served_model_name: str = ""
    """`model` name clients send; empty: vLLM uses `model`."""
    host: str = "127.0.0.1"
    """Interface the server binds to."""
    gpu_memory_utilization: float = Field(0.90, gt=0, le=1)
    """Fraction of each GPU vLLM may take (weights + activations + KV cache)."""
    disagg: DisaggConfig | None = None
    """Disaggregated prefill/decode pools; None: every server does both phases."""

    @model_validator(mode="after")
    def _checks(self) -> VLLMConfig:
        if self.return_routed_experts and self.disagg:
            raise ValueError("return_routed_experts is incompatible with kv_offload and disagg")
        return self


class VLLMLaunch(VLLMEngineArgs):
    """The `vllm serve` servers `swefleet rl`/`eval` start (`inference.kind = "vllm"`): the
    engine settings above; the model (the run's checkpoint, later its latest weights), host,
    port, served name (`inference.model_name`) and GPU memory share
    (`inference.gpu_memory_fraction`) come from the run."""

    executable: str = ""
    """The `vllm` command; empty: `vllm` next to this Python interpreter, else on PATH."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment of every server (over the process's own and the launch defaults)."""
    bytecode_cache: str = "auto"
    """Where the servers' Python keeps its compiled bytecode when the environment forbids
    writing it next to the sources (`PYTHONDONTWRITEBYTECODE`, set in many container images,
    which also ship without `.pyc` files): without a cache every start and restart of `vllm
    serve` compiles vLLM's, torch's and transformers' Python again in each of its processes
    (tens of seconds). `auto`: `~/.cache/swefleet/pycache` (`PYTHONPYCACHEPREFIX`) when
    `PYTHONDONTWRITEBYTECODE` is set, nothing otherwise; a path: always that directory; empty:
    never."""


def _rope_override(cfg: VLLMConfig) -> dict:
    return {
        "rope_parameters": {
            "rope_type": "yarn",
            "factor": cfg.yarn_factor,
            "original_max_position_embeddings": cfg.yarn_original_max_position_embeddings,
        }
    }


def offload_connector(kv: KVOffloadConfig) -> dict:
    """`--kv-transfer-config` of vLLM's native offloading with a disk tier under the CPU one."""
    tier = {
        "type": "fs",
        "root_dir": kv.disk_path,
        "n_read_threads": kv.disk_io_threads,
        "n_write_threads": kv.disk_io_threads,
    }
    return {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "spec_name": "TieringOffloadingSpec",
            "cpu_bytes_to_use": int(kv.cpu_gib * (1 << 30)),
            "eviction_policy": kv.eviction_policy,
            "secondary_tiers": [tier],
        },
    }


def nixl_connector(d: DisaggConfig) -> dict:
    return {
        "kv_connector": d.connector,
        "kv_role": "kv_both",
        "kv_buffer_device": d.kv_buffer_device,
    }


def kv_transfer_config(cfg: VLLMConfig) -> dict | None:
    """The explicit connector config, or None where vLLM's own flags suffice (CPU-only
    offloading uses `--kv-offloading-size`)."""
    offload = offload_connector(cfg.kv_offload) if cfg.kv_offload.disk_path else None
    if cfg.disagg is None:
        return offload
    nixl = nixl_connector(cfg.disagg)
    if not cfg.kv_offload.enabled:
        return nixl
    offload = offload or {
        "kv_connector": "OffloadingConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"cpu_bytes_to_use": int(cfg.kv_offload.cpu_gib * (1 << 30))},
    }
    return {
        "kv_connector": "MultiConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {"connectors": [nixl, offload]},
    }


def serve_args(cfg: VLLMConfig, port: int) -> list[str]:
    """`vllm serve` arguments after the model (flags verified against vLLM 0.26.0)."""
    a = ["--host", cfg.host, "--port", str(port), "--dtype", cfg.dtype, "--seed", str(cfg.seed)]
    if cfg.served_model_name:
        a += ["--served-model-name", cfg.served_model_name]
    a += ["--tensor-parallel-size", str(cfg.tensor_parallel_size)]
    a += ["--data-parallel-size", str(cfg.data_parallel_size)]
    if cfg.enable_expert_parallel:
        a.append("--enable-expert-parallel")
    if cfg.enable_eplb:
        a.append("--enable-eplb")
    if cfg.fp8:
        a += ["--quantization", "fp8"]
    if cfg.kv_cache_fp8:
        a += ["--kv-cache-dtype", "fp8"]
    a.append(
        "--enable-prefix-caching" if cfg.enable_prefix_caching else "--no-enable-prefix-caching"
    )
    a += ["--max-model-len", str(cfg.max_model_len)]
    if cfg.yarn_factor:
        a += ["--hf-overrides", json.dumps(_rope_override(cfg))]
    a += ["--gpu-memory-utilization", str(cfg.gpu_memory_utilization)]
    a += ["--max-num-seqs", str(cfg.max_num_seqs)]
    if cfg.max_num_batched_tokens:
        a += ["--max-num-batched-tokens", str(cfg.max_num_batched_tokens)]
    if cfg.max_cudagraph_capture_size:
        a += ["--max-cudagraph-capture-size", str(cfg.max_cudagraph_capture_size)]
    if cfg.enforce_eager:
        a.append("--enforce-eager")
    if cfg.return_routed_experts:
        a.append("--enable-return-routed-experts")
    if cfg.api_server_count > 1:
        a += ["--api-server-count", str(cfg.api_server_count)]
    if cfg.stream_interval > 1:
        a += ["--stream-interval", str(cfg.stream_interval)]
    # logprobs of the sampled tokens under the raw model distribution (what the trainer compares)
    a += ["--logprobs-mode", "raw_logprobs", "--max-logprobs", str(cfg.max_logprobs)]
    a += ["--worker-extension-cls", WORKER_EXTENSION]
    # vLLM's own NCCL weight-transfer engine: receives the trainer's broadcasts (weight_sync
    # "nccl", inference/weight_sync.py); idle until the fleet calls /init_weight_transfer_engine
    a += ["--weight-transfer-config", json.dumps(WEIGHT_TRANSFER_CONFIG, separators=(",", ":"))]
    connector = kv_transfer_config(cfg)
    if cfg.kv_offload.enabled and connector is None:
        a += ["--kv-offloading-size", str(cfg.kv_offload.cpu_gib)]
        a += ["--kv-offloading-backend", "native"]
    if connector is not None:
        a += ["--kv-transfer-config", json.dumps(connector, separators=(",", ":"))]
    return a + list(cfg.extra_args)


def vllm_executable() -> str:
    """`vllm` next to this interpreter, else on PATH, else the bare name."""
    local = Path(sys.executable).with_name("vllm")
    return str(local) if local.exists() else shutil.which("vllm") or "vllm"


def serve_command(
    cfg: VLLMConfig, port: int, *, index: int = 0, executable: str = ""
) -> tuple[list[str], dict[str, str]]:
    """Full argv and the extra environment of the `index`-th server of this profile."""
    argv = [executable or vllm_executable(), "serve", cfg.model, *serve_args(cfg, port)]
    env = dict(SERVER_ENV)
    if cfg.engine_start_method != "spawn":
        env["VLLM_WORKER_MULTIPROC_METHOD"] = cfg.engine_start_method
        env.update(FORK_SAFE_ENV)
    if cfg.model_runner != "auto":
        env["VLLM_USE_V2_MODEL_RUNNER"] = "1" if cfg.model_runner == "v2" else "0"
    if cfg.disagg is not None:
        env["VLLM_NIXL_SIDE_CHANNEL_HOST"] = cfg.host
        env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(cfg.disagg.side_channel_base_port + index)
    return argv, env


def launch_profile(
    launch: VLLMLaunch,
    model: str | Path,
    *,
    served_model_name: str,
    host: str,
    gpu_memory_utilization: float,
) -> VLLMConfig:
    """The profile of one launched server: `launch`'s engine settings on `model`."""
    engine = launch.model_dump(exclude={"executable", "env", "bytecode_cache"})
    return VLLMConfig(
        model=str(model),
        served_model_name=served_model_name,
        host=host,
        gpu_memory_utilization=gpu_memory_utilization,
        **engine,
    )


def launch_env(
    profile_env: dict[str, str], extra: dict[str, str], gpus: Sequence[int],
    bytecode_cache: str = "",
) -> dict[str, str]:
    """Full environment of a launched server: this process's, the profile's, `extra`
    (`inference.vllm.env`), its GPUs (CUDA_VISIBLE_DEVICES; none: inherited), the
    `LAUNCH_ENV_DEFAULTS` where nothing above set them, and the bytecode cache
    (`VLLMLaunch.bytecode_cache`)."""
    env = {**os.environ, **profile_env, **extra}
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(g) for g in gpus)
    for key, value in LAUNCH_ENV_DEFAULTS.items():
        env.setdefault(key, value)
    if cache := bytecode_cache_dir(bytecode_cache, env):
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.setdefault("PYTHONPYCACHEPREFIX", cache)
    return env


def bytecode_cache_dir(setting: str, env: dict[str, str]) -> str | None:
    """The directory `bytecode_cache = setting` gives under `env`, or None for no cache."""
    if setting == "auto":
        if not env.get("PYTHONDONTWRITEBYTECODE"):
            return None
        setting = str(Path.home() / ".cache" / "swefleet" / "pycache")
    return setting or None


def missing_executable(executable: str) -> str | None:
    """Why `executable` (empty: the default `vllm`) cannot run, or None when it can."""
    path = executable or vllm_executable()
    found = shutil.which(path) if "/" not in path else (path if Path(path).is_file() else None)
    if found and os.access(found, os.X_OK):
        return None
    where = f"{executable!r} is not an executable file" if executable else (
        f"no `vllm` next to {sys.executable} or on PATH")
    return (f"kind='vllm' needs vLLM {VLLM_VERSION} installed (pip install 'swefleet[vllm]') "
            f"or inference.vllm.executable set: {where}")


def disaggregated_profiles(cfg: VLLMConfig) -> tuple[VLLMConfig, VLLMConfig]:
    """(prefill pool, decode pool) profiles of a config with `disagg` set.

    The prefill pool needs no CUDA-graph-heavy decode settings; it keeps prefix caching (shared
    prompts of a GRPO group are prefilled once). The decode pool receives blocks over NIXL.
    Both run the same weights, so weight updates go to both pools (`inference/disagg.py`)."""
    if cfg.disagg is None:
        raise ValueError("disaggregated_profiles needs cfg.disagg")
    prefill = cfg.model_copy(update={"max_num_seqs": min(cfg.max_num_seqs, 128)})
    return prefill, cfg.model_copy()


def pool_commands(
    cfg: VLLMConfig, base_port: int, servers: int, *, first_index: int = 0
) -> list[tuple[list[str], dict[str, str]]]:
    """Commands for `servers` servers on ports base_port, base_port+1, ..."""
    return [serve_command(cfg, base_port + i, index=first_index + i) for i in range(servers)]


def emitted_flags(argv: Sequence[str]) -> list[str]:
    """The `--flags` of an argv (values that start with `--` never occur in our profiles)."""
    return [arg for arg in argv if arg.startswith("--")]
