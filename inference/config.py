"""Configuration of the inference room: the embedded engine servers and the fleet client.

Light module (pydantic only): `swefleet.config` imports it to build the config tree.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


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
    """`model` field sent with each request (needed by vLLM servers serving several models);
    empty sends none."""
    max_connections: int = Field(1024, ge=1)
    """Most open HTTP connections of the client over all servers and pools."""
    http_pool_shards: int = Field(16, ge=1)
    """Independent HTTP connection pools that requests rotate over. httpcore spends CPU linear
    in a pool's size on every request, so at hundreds of concurrent requests several smaller
    pools cut the client's overhead several times (see benchmarks/fleet_client.py)."""

    @field_validator("servers")
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
