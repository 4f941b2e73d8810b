"""Configuration of the inference room: the embedded engine servers and the fleet client.

Light module (pydantic only): `swefleet.config` imports it to build the config tree.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


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

    servers: list[str] = Field(default_factory=list)
    """Base URLs (`http://host:port`) of already running OpenAI-compatible servers. Empty: the
    run starts `num_servers` embedded engines itself."""
    num_servers: int = Field(1, ge=1)
    """How many embedded engine servers to start when `servers` is empty."""
    host: str = "127.0.0.1"
    """Interface the embedded servers bind to."""
    port: int = Field(0, ge=0, le=65535)
    """Port of the first embedded server (the next ones count up); 0 picks free ports."""
    device: str = "cpu"
    """Torch device of the embedded engine: `cpu`, `cuda`, `cuda:1`."""
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
    lowered so `max_batch_size` slots fit half the free GPU memory."""
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
    embedded servers this project starts serve exactly this name (`--served-model-name`); a
    server that does not serve it answers 404 and the request fails (`server_error`)."""
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
    deadline, requests are not streamed (the fastest path), only `request_timeout_s` applies."""
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
