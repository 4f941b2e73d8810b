"""Configuration of the inference room: the embedded engine servers and the fleet client.

Light module (pydantic only): `swefleet.app.config` imports it to build the config tree.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    NonNegativeInt,
    field_validator,
    model_validator,
)
from swefleet.inference.vllm_launch import VLLMLaunch

#: embedded-engine settings a vLLM server does not read (its own are under `inference.vllm`)
ENGINE_ONLY = {
    "dtype": "vllm.dtype",
    "max_batch_size": "vllm.max_num_seqs",
    "kv_capacity": "vllm.max_model_len",
    "cuda_graphs": "vllm.enforce_eager",
    "kv_mode": None,
    "prefix_cache_mb": "vllm.enable_prefix_caching",
    "max_queue": None,
    "cpu_threads": None,
}


class ConcurrencyConfig(BaseModel):
    """Adaptive in-flight limit per server from its KV-cache usage (`inference/concurrency.py`)."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    """Poll every server's `/metrics` and cap its in-flight requests (AIMD on
    `vllm:kv_cache_usage_perc`); requests over every cap wait in the client. Off: no cap."""
    initial_inflight: int = Field(64, ge=1)
    """Starting limit per server that exposes the KV-usage gauge."""
    min_inflight: int = Field(1, ge=1)
    """Floor of a limit."""
    max_inflight: int = Field(1024, ge=1)
    """Ceiling of a limit; also the limit of servers without the gauge."""
    poll_interval_s: float = Field(1.0, gt=0)
    """Seconds between two `/metrics` polls of one server."""
    grow_below: float = Field(0.6, gt=0, le=1)
    """Additive increase while KV usage is below this and the limit binds."""
    cut_above: float = Field(0.85, gt=0, le=1)
    """Multiplicative decrease when KV usage is above this."""
    increase: float = Field(4.0, gt=0)
    """Requests added to a binding limit per poll."""
    decrease_factor: float = Field(0.7, gt=0, lt=1)
    """Factor of a cut."""
    binding_fraction: float = Field(0.9, gt=0, le=1)
    """A limit binds when in-flight requests reach this fraction of it."""
    cooldown_s: float = Field(3.0, ge=0)
    """Least time between two cuts of one server (the gauge lags behind admissions)."""

    @model_validator(mode="after")
    def _order(self) -> ConcurrencyConfig:
        if not self.min_inflight <= self.initial_inflight <= self.max_inflight:
            raise ValueError("need min_inflight <= initial_inflight <= max_inflight")
        if self.grow_below >= self.cut_above:
            raise ValueError("grow_below must be below cut_above")
        return self


class InferenceConfig(BaseModel):
    """Where generation runs and how the fleet client talks to it."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["auto", "embedded", "vllm", "external"] = "auto"
    """Where generation runs. `embedded`: the run starts `num_servers` embedded engine servers
    (CPU or GPU); `vllm`: the run starts `num_servers` `vllm serve` servers on `gpus` (settings
    under `inference.vllm`); `external`: the already running servers of `servers` (started by
    you; the embedded engine's settings below are then unused). Launched servers are
    supervised: a dead one is restarted on its port with the current weights. `auto`:
    `external` when `servers` is set, else `embedded`."""
    servers: list[str] = Field(default_factory=list)
    """Base URLs (`http://host:port`) of already running OpenAI-compatible servers (kind
    `external`; `--server URL` on the command line replaces them). An error with a launching
    kind."""
    num_servers: int = Field(1, ge=1)
    """How many servers the run starts (kind `embedded` or `vllm`); must stay 1 with
    `external` (the servers are `servers`)."""
    gpus: list[NonNegativeInt] = Field(default_factory=list)
    """Physical GPU indices of the launched servers: server i gets `gpus[i*gpus_per_server :
    (i+1)*gpus_per_server]` as its CUDA_VISIBLE_DEVICES (the embedded engine then runs on
    `cuda`); the length must be `num_servers * gpus_per_server`, no GPU twice. Setting them
    means `device = "cuda"`. Empty: servers inherit this process's GPUs (the embedded engine
    uses `device`; one server only when that is a GPU)."""
    gpus_per_server: int = Field(1, ge=1)
    """GPUs of one launched server: 1 for the embedded engine; vLLM: tensor_parallel_size x
    data_parallel_size (the default when left out)."""
    gpu_memory_fraction: float | None = Field(None, gt=0, le=1)
    """Fraction of each server GPU inference may take: vLLM's `--gpu-memory-utilization`; the
    embedded engine's static KV cache is sized to it (this share of the GPU minus the memory
    its weights took, at most what is free). None: 0.9 on GPUs of their own, 0.35 when the
    trainer shares the GPU (an explicit value above 0.6 is then an error). Not for CPU or
    external servers."""
    vllm: VLLMLaunch = Field(default_factory=VLLMLaunch)
    """Engine settings of the `vllm serve` servers of kind `vllm` (parallelism, FP8, prefix
    caching, max_model_len, routed experts, ...; the model, host, port, served name and memory
    share come from the run); `executable` and `env` of the command. Set only for kind vllm."""
    restart_dead_servers: bool = True
    """Restart a launched server that died (process exited, or `/health` failed 3 checks in a
    row) on the same port with the current weights; off (or a failed restart): the run goes on
    with the other servers, and stops with an error when none is left."""
    standby_servers: bool = False
    """Keep one standby process per launched server: a Python with the server's modules
    imported (vLLM, or torch and the embedded engine), waiting to become that server, so a
    restart skips the interpreter start and the imports (`inference/standby.py`). Costs the
    host memory of one idle import per server (the embedded engine's: 525 MiB; each standby
    logs its own in the server log) and no GPU memory; a new standby is started once a
    restarted server is ready."""
    health_interval_s: float = Field(2.0, gt=0)
    """Seconds between two liveness checks of every launched server."""
    host: str = "127.0.0.1"
    """Interface the launched servers bind to."""
    port: int = Field(0, ge=0, le=65535)
    """Port of the first launched server (the next ones count up); 0 picks free ports. A
    restarted server keeps its port."""
    device: str = "cpu"
    """Torch device of the embedded engine: `cpu`, `cuda`, `cuda:1` (`cuda` when `gpus` are
    set; vLLM servers always run on GPUs, an explicit `cpu` is then an error)."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Weights dtype of the embedded engine; `auto` is float32 on CPU and bfloat16 on CUDA."""
    cpu_threads: int = Field(0, ge=0)
    """torch CPU threads per embedded server; 0 keeps torch's default (all cores). Set 1-2 when
    several servers or other CPU-heavy processes share a small machine."""
    max_batch_size: int = Field(16, ge=1)
    """Most sequences the embedded engine decodes together; later requests wait in its queue."""
    max_queue: int = Field(0, ge=0)
    """Most requests waiting in an embedded engine's queue before it answers 503; 0: no limit."""
    kv_mode: Literal["auto", "dynamic", "static"] = "auto"
    """Embedded engine KV cache: `static` (preallocated slots, batched prefill, CUDA-graph decode;
    dense Qwen3/Qwen2/Llama models), `dynamic` (transformers' own forward, any model); `auto` is
    static on CUDA when the model allows it, dynamic otherwise."""
    kv_capacity: int = Field(0, ge=0)
    """Static cache tokens per sequence slot (prompt + completion); 0: the model's max length,
    lowered so `max_batch_size` slots fit the server's `gpu_memory_fraction` of its GPU (minus
    the weights; half the free memory for a server started on its own)."""
    cuda_graphs: bool = True
    """Replay static-cache decode steps as CUDA graphs (one capture per batch/width bucket)."""
    prefix_cache_mb: float = Field(1024.0, ge=0)
    """Dynamic KV cache: most MiB of finished requests' K/V kept parked for reuse by later
    prompts sharing their prefix (least recently used dropped first); 0 turns prefix reuse off
    for the dynamic cache. The static cache reuses its free slots instead."""
    startup_timeout_s: float = Field(300.0, gt=0)
    """Deadline for an embedded server to load its model and answer `/health`."""
    request_timeout_s: float = Field(600.0, gt=0)
    """Total deadline of one `generate` call, retries and failover included; when it passes the
    call raises `RequestCancelled(timeout)` and is never retried."""
    connect_timeout_s: float = Field(5.0, gt=0)
    """Deadline for opening one TCP connection to a server."""
    retry_budget: int = Field(2, ge=0)
    """Extra attempts per request, only after connection errors or HTTP 502/503 (counted in
    the metrics); never after a timeout, a 4xx, a 500 or a completed generation."""
    retry_backoff_s: float = Field(0.05, ge=0)
    """First wait between attempts; doubles per attempt, capped at 1 s."""
    server_cooldown_s: float = Field(5.0, ge=0)
    """A server that refused a connection is skipped for this long (then probed again)."""
    affinity_max_imbalance: int = Field(4, ge=0)
    """An episode stays on its previous server (prefix-cache reuse) unless that server has more
    than this many requests in flight beyond the least loaded one."""
    update_timeout_s: float = Field(600.0, gt=0)
    """Deadline for every server to load new weights in `update_weights`."""
    abort_on_update: bool = False
    """Abort in-flight requests when weights change (they end `stale`); False keeps decoding them
    with the new weights on top of the old KV cache, as prime-rl's `pause(mode="keep")`."""
    weight_sync: Literal["filesystem", "nccl", "shared_memory"] = "filesystem"
    """How new weights reach the servers. `filesystem`: the trainer exports every version as an
    HF directory and each server loads it. `nccl`: the trainer broadcasts every version to all
    server workers over a process group of its own (NCCL on GPUs, gloo on CPU; vLLM servers
    through vLLM's weight-transfer engine), announced by a small `weights/vNNNNNN.nccl.json`
    marker; directories are still exported every `trainer.checkpoint_every` steps and at the
    end, for resume (`swefleet/weight_transfer.py`). `shared_memory`: the trainer copies every
    version into one buffer that the servers on its host map (CUDA IPC when the trainer is on a
    GPU, a shared-memory file on CPU) and each server copies it in; no file, no group
    (`swefleet/shared_weights.py`); launched servers only, announced by the same markers."""
    weight_sync_host: str = "127.0.0.1"
    """`nccl`: the address the trainer's rendezvous store listens on and the workers connect to
    (the trainer's host, reachable from every server)."""
    weight_sync_port: int = Field(0, ge=0, le=65535)
    """`nccl`: the rendezvous port; 0 picks a free one when the run starts."""
    weight_sync_timeout_s: float = Field(300.0, gt=0)
    """`nccl`: deadline for the trainer and every worker to join the group, and for one
    collective; a server that never joins fails the update (and the run) with a message."""
    temperature: float = Field(1.0, ge=0)
    """Sampling temperature sent with every request (0: greedy)."""
    top_p: float = Field(1.0, gt=0, le=1)
    """Nucleus sampling mass sent with every request."""
    max_tokens_per_turn: int = Field(4096, ge=1)
    """Cap on `max_tokens` of one request, whatever the caller asks for."""
    stop_token_ids: list[int] = Field(default_factory=list)
    """Token ids that end a completion besides the model's EOS ids."""
    model_name: str = ""
    """`model` field sent with each request; empty sends none (the server's own model). The
    servers this project starts serve exactly this name (the embedded engine's
    `served_model_names`, vLLM's `--served-model-name`); a server that does not serve it answers 404 and the request fails (`server_error`)."""
    api_key_env: str = ""
    """Name of the environment variable holding the API key of an outside chat endpoint
    (`swefleet eval --api chat`), sent as `Authorization: Bearer <key>`; empty sends none. Only
    the variable's name is configured: the key itself is never written to a file or a log."""
    max_connections: int = Field(1024, ge=1)
    """Most open HTTP connections of the client over all servers and pools."""
    server_api: Literal["swefleet", "vllm"] = "swefleet"
    """Weight-update API of the servers: `swefleet` (embedded/scripted: POST /update_weights,
    versions in /health and in answers) or `vllm` (vLLM 0.26 with `VLLM_SERVER_DEV_MODE=1` and
    the swefleet worker extension: /pause?mode=keep|abort, /collective_rpc
    `update_weights_from_path`, /resume; see docs/vllm.md)."""
    cache_salt: bool = True
    """Send `cache_salt` = `cache_salt_prefix` + the server's policy version with every request:
    vLLM's prefix cache then never serves KV blocks computed by older weights."""
    cache_salt_prefix: str = "swefleet-policy-v"
    """Prefix of the per-version `cache_salt` (make it unique per run if servers are shared)."""
    concurrency: ConcurrencyConfig = Field(default_factory=ConcurrencyConfig)
    """Adaptive per-server in-flight limits from KV-cache usage."""
    prefill_servers: list[str] = Field(default_factory=list)
    """Disaggregated prefill/decode (vLLM NixlConnector, `inference/disagg.py`): base URLs of
    the prefill pool; the fleet's other servers are then the decode pool. Empty: every server
    does both phases."""
    first_token_timeout_s: float | None = Field(None, gt=0)
    """Deadline from the start of a `generate` call (routing, connecting and retries included) to
    its first token; when it passes the call raises `RequestCancelled(timeout)` and is never
    retried. Unified servers: requests are then sent with `stream: true` and the first streamed
    token must arrive in time (the streamed chunks are assembled into the same completion as an
    unstreamed answer); disaggregated serving: the prefill answer must. None: no separate
    deadline, only `request_timeout_s` applies (requests are streamed only with `stream`)."""
    stream: bool = False
    """Stream every request from unified servers (`stream: true`, assembled into the same
    completion). With vLLM's `stream_interval` of ~16 tokens and several API server processes
    the answers are built while the batch decodes instead of all at its end: on one H200 this
    raised the fleet's tokens/s from 0.87x to 1.18x of `vllm.LLM` offline (docs/benchmarks.md).
    Small servers (the embedded engine) answer faster unstreamed."""
    scrape_metrics: bool | None = None
    """Poll every server's `/metrics` every `concurrency.poll_interval_s` (also without adaptive
    concurrency) for KV-cache usage and the prefix-cache hit rate (`infer/kv_hit_rate`). None:
    on in `swefleet rl` (a step metric), off for a FleetClient used on its own."""

    @field_validator("servers", "prefill_servers")
    @classmethod
    def _urls(cls, urls: list[str]) -> list[str]:
        for url in urls:
            if not url.startswith(("http://", "https://")):
                raise ValueError(f"server URL must start with http:// or https://: {url!r}")
        return [url.rstrip("/") for url in urls]

    @model_validator(mode="after")
    def _timeouts(self) -> InferenceConfig:
        if self.connect_timeout_s > self.request_timeout_s:
            raise ValueError("connect_timeout_s must not exceed request_timeout_s")
        return self

    @model_validator(mode="after")
    def _placement(self) -> InferenceConfig:
        """Settings that cannot take effect with the chosen kind are errors, not ignored."""
        kind = self.resolved_kind
        if len(set(self.gpus)) != len(self.gpus):
            raise ValueError(f"gpus={self.gpus} lists a GPU twice")
        if kind != "vllm" and self.vllm != VLLMLaunch():
            raise ValueError(f"inference.vllm is for kind='vllm' (kind is {kind!r})")
        if self.stream and self.vllm.return_routed_experts:
            raise ValueError("inference.stream: vLLM's streamed answers carry no routed_experts, "
                             "so router replay would get none; set stream = false")
        if kind == "external":
            _check_external(self)
            if self.weight_sync == "shared_memory":
                raise ValueError("weight_sync='shared_memory' needs servers this run launches on "
                                 "the trainer's host (kind 'embedded' or 'vllm'), not external")
            return self
        if self.servers:
            raise ValueError(f"servers lists running servers (kind 'external'); kind={kind!r} "
                             "starts its own: drop servers or set kind='external'")
        if kind == "vllm":
            _place_vllm(self)
        else:
            _place_embedded(self)
        if self.gpus and len(self.gpus) != self.num_servers * self.gpus_per_server:
            raise ValueError(f"gpus={self.gpus} must list num_servers x gpus_per_server = "
                             f"{self.num_servers} x {self.gpus_per_server} GPUs")
        return self

    @property
    def resolved_kind(self) -> Literal["embedded", "vllm", "external"]:
        """`kind` with `auto` resolved: external when `servers` is set, else embedded."""
        if self.kind == "auto":
            return "external" if self.servers else "embedded"
        return self.kind


EMBEDDED_API_ERROR = "server_api='vllm' is for vLLM servers; the embedded engine speaks 'swefleet'"


def _check_external(cfg: InferenceConfig) -> None:
    if not cfg.servers:
        raise ValueError("kind='external' needs servers (or --server URL)")
    if cfg.num_servers != 1:
        raise ValueError(f"num_servers={cfg.num_servers} launches servers; kind='external' "
                         f"uses the {len(cfg.servers)} of servers")
    for name in ("gpus", "gpu_memory_fraction"):
        if getattr(cfg, name):
            raise ValueError(f"{name} places launched servers; kind='external' launches none")
    if cfg.gpus_per_server != 1:
        raise ValueError("gpus_per_server places launched servers; kind='external' launches none")


def _place_embedded(cfg: InferenceConfig) -> None:
    if cfg.kind == "embedded" and cfg.server_api != "swefleet":  # `auto`: swefleet/app/topology.py
        raise ValueError(EMBEDDED_API_ERROR)  # (a FleetClient on its own may talk to any server)
    if cfg.gpus_per_server != 1:
        raise ValueError(f"gpus_per_server={cfg.gpus_per_server}: an embedded server uses 1 GPU")
    if cfg.gpus:
        if "device" in cfg.model_fields_set and cfg.device != "cuda":
            raise ValueError(f"device={cfg.device!r} with gpus={cfg.gpus}: servers run on their "
                             "gpus (CUDA_VISIBLE_DEVICES) as device 'cuda'")
        cfg.device = "cuda"
    elif cfg.device.startswith("cuda") and cfg.num_servers > 1:
        raise ValueError(f"num_servers={cfg.num_servers} on {cfg.device}: set gpus, one GPU "
                         "per server")
    elif cfg.device == "cpu" and cfg.gpu_memory_fraction is not None:
        raise ValueError("gpu_memory_fraction with device='cpu': the servers use no GPU")


def _place_vllm(cfg: InferenceConfig) -> None:
    if "server_api" in cfg.model_fields_set and cfg.server_api != "vllm":
        raise ValueError(f"server_api={cfg.server_api!r} with kind='vllm': vLLM servers speak "
                         "'vllm' (the default for this kind)")
    cfg.server_api = "vllm"
    per_server = cfg.vllm.gpus_per_server
    if "gpus_per_server" not in cfg.model_fields_set:
        cfg.gpus_per_server = per_server
    elif cfg.gpus_per_server != per_server:
        raise ValueError(f"gpus_per_server={cfg.gpus_per_server} but vllm.tensor_parallel_size x "
                         f"data_parallel_size = {per_server}")
    if "device" in cfg.model_fields_set and cfg.device != "cuda":
        raise ValueError(f"device={cfg.device!r} with kind='vllm': vLLM servers run on GPUs "
                         "(place them with gpus)")
    cfg.device = "cuda"
    if not cfg.gpus and cfg.num_servers > 1:
        raise ValueError(f"num_servers={cfg.num_servers} vLLM servers need gpus (their "
                         "CUDA_VISIBLE_DEVICES)")
    default = InferenceConfig.model_fields
    for name, instead in ENGINE_ONLY.items():
        if getattr(cfg, name) != default[name].default:
            use = f"; set inference.{instead}" if instead else ""
            raise ValueError(f"{name} is an embedded engine setting; kind='vllm' does not "
                             f"read it{use}")


@dataclass(frozen=True)
class ServerSpec:
    """Where one server of the fleet runs (`swefleet.app.topology` resolves them from the config)."""

    index: int
    url: str = ""
    """External servers: their URL."""
    gpus: tuple[int, ...] = ()
    """Launched servers: their CUDA_VISIBLE_DEVICES; empty: inherited."""
    device: str = "cpu"
    """Embedded engine: its torch device inside the server process."""
    port: int = 0
    """Launched servers: the port of their first start; 0: a free one."""
    gpu_memory_fraction: float | None = None
    """Share of each of its GPUs the server may take; None: no GPU."""
