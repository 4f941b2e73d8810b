"""Which role gets what: the inference servers (kind, GPUs, ports, devices) and the trainer
(ranks, GPUs), resolved from one `RunConfig` and checked as a whole.

    topo = resolve_topology(cfg)      # ValueError (one line) for a setting that cannot work
    topo.servers[1].gpus              # (2, 3): CUDA_VISIBLE_DEVICES of server 1

Per-role settings are checked where they live (`InferenceConfig`, `TrainerConfig`); here go the
rules that need both roles. GPU numbers are physical indices where `gpus` lists them, else the
device index the role uses (`cuda:1` -> 1; the trainer's ranks 0..ranks-1): inference and
trainer may share a GPU only when both use exactly that one GPU; the servers' memory share then
defaults to 0.35 (at most 0.6), else to 0.9. Pure: no files, no processes, no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from swefleet.inference.config import EMBEDDED_API_ERROR, InferenceConfig, ServerSpec

if TYPE_CHECKING:
    from swefleet.app.config import RunConfig

OWN_GPU_FRACTION = 0.9
SHARED_GPU_FRACTION = 0.35
MAX_SHARED_FRACTION = 0.6


@dataclass(frozen=True)
class Topology:
    """What each role gets."""

    kind: str
    """Inference kind: `embedded`, `vllm` or `external`."""
    servers: tuple[ServerSpec, ...]
    """The servers of the fleet, in order (launched: their GPUs/device/port; external: URLs)."""
    trainer_ranks: int
    """Trainer processes."""
    trainer_gpus: tuple[int, ...]
    """GPUs of the trainer's ranks (empty: CPU)."""
    shared_gpus: tuple[int, ...]
    """GPUs used by both inference and the trainer (at most one)."""

    @property
    def launched(self) -> bool:
        return self.kind != "external"

    @property
    def inference_gpus(self) -> tuple[int, ...]:
        return tuple(g for s in self.servers for g in s.gpus or _device_gpus(s.device))


def resolve_topology(cfg: RunConfig) -> Topology:
    """The placement of every role; ValueError (one line) when roles collide."""
    inf = cfg.inference
    kind = inf.resolved_kind
    ranks, trainer_gpus = _trainer(cfg)
    if kind == "external":
        servers = tuple(ServerSpec(i, url=url) for i, url in enumerate(inf.servers))
        return Topology(kind, servers, ranks, trainer_gpus, ())
    if kind == "embedded" and inf.server_api != "swefleet":
        raise ValueError(EMBEDDED_API_ERROR)
    inference_gpus = _inference_gpus(inf)
    shared = tuple(g for g in inference_gpus if g in trainer_gpus)
    if shared and not (inference_gpus == trainer_gpus == shared and len(shared) == 1):
        raise ValueError(
            f"inference GPUs {list(inference_gpus)} and trainer GPUs {list(trainer_gpus)} "
            f"overlap on {list(shared)}: give each role its own GPUs (inference.gpus, "
            "trainer.gpus), or run both on exactly one GPU")
    fraction = _fraction(inf, bool(shared)) if inference_gpus else None
    servers = tuple(_server(inf, i, fraction) for i in range(inf.num_servers))
    return Topology(kind, servers, ranks, trainer_gpus, shared)


def _trainer(cfg: RunConfig) -> tuple[int, tuple[int, ...]]:
    ranks, gpus = cfg.trainer.ranks, tuple(cfg.trainer.gpus)
    if gpus:
        return ranks, gpus
    if cfg.trainer.device == "cpu":
        return ranks, ()
    return ranks, tuple(range(ranks))  # cuda/auto: rank i on cuda:i (auto on a CPU: no GPU)


def _inference_gpus(inf: InferenceConfig) -> tuple[int, ...]:
    if inf.gpus:
        return tuple(inf.gpus)
    if inf.resolved_kind == "vllm":
        return tuple(range(inf.gpus_per_server))
    return _device_gpus(inf.device)


def _device_gpus(device: str) -> tuple[int, ...]:
    if not device.startswith("cuda"):
        return ()
    _, _, index = device.partition(":")
    return (int(index or 0),)


def _fraction(inf: InferenceConfig, shared: bool) -> float:
    if inf.gpu_memory_fraction is None:
        return SHARED_GPU_FRACTION if shared else OWN_GPU_FRACTION
    if shared and inf.gpu_memory_fraction > MAX_SHARED_FRACTION:
        raise ValueError(
            f"inference.gpu_memory_fraction={inf.gpu_memory_fraction} on a GPU shared with the "
            f"trainer leaves it too little: at most {MAX_SHARED_FRACTION}")
    return inf.gpu_memory_fraction


def _server(inf: InferenceConfig, i: int, fraction: float | None) -> ServerSpec:
    per = inf.gpus_per_server
    gpus = tuple(inf.gpus[i * per : (i + 1) * per])
    port = inf.port + i if inf.port else 0
    return ServerSpec(i, gpus=gpus, device=inf.device, port=port, gpu_memory_fraction=fraction)
