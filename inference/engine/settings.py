"""Every setting of one embedded engine server process, as one typed document.

    settings = EngineSettings.from_inference(config, model_dir, port=0, device="cuda")
    settings = EngineSettings(model_dir=path, threads=1)  # tests, tools: defaults otherwise
    argv = [..., "-m", "swefleet.inference.engine.server", "--settings", settings.to_json()]

The launcher builds it once (from `InferenceConfig`, or directly in tests and tools), sends it
across the process boundary as one JSON document, and the server validates it with this same
model (`EngineSettings.from_json`: a bad document is one line of error) and builds its engine
from it. Light module (pydantic only): launchers import it without torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

if TYPE_CHECKING:
    from swefleet.inference.config import InferenceConfig


class EngineSettings(BaseModel):
    """One embedded server: what it loads, where it listens, how its engine batches and caches."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_dir: str = Field(min_length=1)
    """HF-format checkpoint directory the server loads (its weights are policy `policy_version`)."""
    host: str = "127.0.0.1"
    """Address the server binds."""
    port: int = Field(0, ge=0, le=65535)
    """Port the server binds; 0 picks a free one (reported through `--port-file`)."""
    device: str = "cpu"
    """torch device of the model and its KV cache (`cpu`, `cuda`, `cuda:1`, ...)."""
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = "auto"
    """Weight dtype; auto: the checkpoint's."""
    max_batch_size: int = Field(16, ge=1)
    """Most sequences decoded together."""
    max_queue: int = Field(0, ge=0)
    """503 beyond this many waiting requests; 0: no cap."""
    policy_version: int = Field(0, ge=0)
    """Policy version of the weights in `model_dir` (restarts start on later versions)."""
    threads: int = Field(0, ge=0)
    """torch CPU threads; 0: torch's default."""
    kv_mode: Literal["auto", "dynamic", "static"] = "auto"
    """KV cache backend; auto: static (CUDA graphs) on CUDA for Llama-family models."""
    kv_capacity: int = Field(0, ge=0)
    """Static cache: tokens per slot; 0: auto."""
    cuda_graphs: bool = True
    """Static cache: decode through CUDA graphs (off: eager decode)."""
    prefix_cache: bool = True
    """Reuse a finished request's K/V for a later prompt's prefix."""
    prefix_cache_mb: float = Field(1024.0, ge=0)
    """Dynamic cache: most MiB of finished requests' K/V kept for prefix reuse (LRU)."""
    routed_experts: bool = True
    """MoE models: return the routed experts of each token (vLLM's format)."""
    served_model_names: list[str] = Field(default_factory=list)
    """Model name(s) served, as vLLM's `--served-model-name`; empty: the checkpoint
    directory's name. Any other `model` of a request is answered 404."""
    gpu_memory_fraction: float | None = Field(None, gt=0, le=1)
    """Static cache on CUDA: size the KV cache to this share of the GPU minus the weights;
    None: half the free memory."""
    log_level: Literal["debug", "info", "warning", "error", "critical"] = "info"
    """Level of the server's log."""

    @field_validator("model_dir", mode="before")
    @classmethod
    def _path_to_str(cls, value: object) -> object:
        return str(value) if isinstance(value, Path) else value

    @classmethod
    def from_inference(
        cls,
        config: InferenceConfig,
        model_dir: str | Path,
        *,
        port: int = 0,
        device: str | None = None,
        policy_version: int = 0,
        gpu_memory_fraction: float | None = None,
    ) -> Self:
        """The settings of one server of `config`'s fleet: every engine setting from `config`;
        it serves `config.model_name`, the name the fleet client sends. `device` None: the
        config's; `port`, `policy_version`, `gpu_memory_fraction`: this server's."""
        return cls(
            model_dir=model_dir,
            host=config.host,
            port=port,
            device=config.device if device is None else device,
            dtype=config.dtype,
            max_batch_size=config.max_batch_size,
            max_queue=config.max_queue,
            policy_version=policy_version,
            threads=config.cpu_threads,
            kv_mode=config.kv_mode,
            kv_capacity=config.kv_capacity,
            cuda_graphs=config.cuda_graphs,
            prefix_cache_mb=config.prefix_cache_mb,
            served_model_names=[config.model_name] if config.model_name else [],
            gpu_memory_fraction=gpu_memory_fraction,
        )

    def to_json(self) -> str:
        """The document the server reads (`--settings`)."""
        return self.model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> Self:
        """Validate a document; ValueError with one line naming every bad field."""
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'document'}: {e['msg']}" for e in exc.errors()
            )
            one_line = " ".join(problems.split())
            raise ValueError(f"bad engine settings: {one_line}") from None
