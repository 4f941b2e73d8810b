"""Which node of the allocation runs which role, from the run config and the job's host list
(`scontrol show hostnames`, in order). Pure: no files, no processes.

    trainer nodes   = hosts[:trainer_nodes]        (hosts[0] is the head)
    inference nodes = hosts[trainer_nodes:]        (each runs `[inference]`'s servers)

Server k runs on inference node k // num_servers, as server k % num_servers of that node (its
GPUs and port as `swefleet.app.topology` places servers on one machine).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from swefleet.app.topology import resolve_topology
from swefleet.inference.config import ServerSpec

if TYPE_CHECKING:
    from swefleet.app.config import RunConfig


@dataclass(frozen=True)
class ServerPlace:
    """One inference-node server."""

    index: int
    """Its index in the fleet (over all inference nodes)."""
    node: int
    """Its node: index into the inference nodes."""
    spec: ServerSpec
    """Its GPUs, device, memory share on that node (`spec.index`: its index there)."""
    port: int
    """The port it listens on."""


def check_layout(cfg: RunConfig) -> None:
    """ValueError (one line) for a layout that cannot work."""
    s, inf, tr = cfg.slurm, cfg.inference, cfg.trainer
    if s.inference_nodes and inf.resolved_kind == "external":
        raise ValueError("slurm.inference_nodes > 0 starts servers there: set inference.kind "
                         "to embedded or vllm (external servers need no inference nodes)")
    if s.inference_nodes and inf.weight_sync == "nccl":
        raise ValueError("inference.weight_sync='nccl' across nodes is not supported by "
                         "swefleet slurm yet: use 'filesystem' (the shared run directory)")
    if s.trainer_nodes > 1 and (tr.ranks % s.trainer_nodes or tr.gpus):
        raise ValueError(f"trainer.ranks={tr.ranks} must split evenly over slurm.trainer_nodes="
                         f"{s.trainer_nodes} (and trainer.gpus stay empty: each node's ranks use "
                         "its GPUs 0..ranks/nodes-1)")
    per_node = tr.ranks // s.trainer_nodes
    if s.gpus_per_node and tr.device == "cuda" and per_node > s.gpus_per_node:
        raise ValueError(f"trainer.ranks={tr.ranks} on {s.trainer_nodes} trainer node(s) need "
                         f"{per_node} GPUs per node > slurm.gpus_per_node={s.gpus_per_node}")
    if s.gpus_per_node and s.inference_nodes:
        used = len(inference_specs(cfg)) * inf.gpus_per_server
        on_gpus = inf.resolved_kind == "vllm" or inf.device.startswith("cuda")
        if on_gpus and used > s.gpus_per_node:
            raise ValueError(f"{used} inference GPUs per node > slurm.gpus_per_node="
                             f"{s.gpus_per_node}")


def inference_specs(cfg: RunConfig) -> tuple[ServerSpec, ...]:
    """The servers of one inference node (`[inference]` placed as on one machine)."""
    from swefleet.trainer.config import TrainerConfig

    alone = cfg.model_copy(update={"trainer": TrainerConfig(device="cpu")})
    return resolve_topology(alone).servers


def server_places(cfg: RunConfig) -> list[ServerPlace]:
    specs = inference_specs(cfg)
    base = cfg.inference.port or cfg.slurm.server_port
    return [ServerPlace(node * len(specs) + spec.index, node, spec, base + spec.index)
            for node in range(cfg.slurm.inference_nodes) for spec in specs]


def split_hosts(cfg: RunConfig, hosts: list[str]) -> tuple[list[str], list[str]]:
    """(trainer hosts, inference hosts); ValueError when the job has too few."""
    s = cfg.slurm
    if len(hosts) < s.nodes:
        raise ValueError(f"the job has {len(hosts)} nodes, the layout needs {s.nodes}")
    return hosts[: s.trainer_nodes], hosts[s.trainer_nodes : s.nodes]


def server_host(cfg: RunConfig, place: ServerPlace, hosts: list[str]) -> str:
    """The address server `place` binds to and is reached at."""
    return cfg.slurm.server_host or split_hosts(cfg, hosts)[1][place.node]


def server_urls(cfg: RunConfig, hosts: list[str]) -> list[str]:
    return [f"http://{server_host(cfg, p, hosts)}:{p.port}" for p in server_places(cfg)]


def trainer_launch(cfg: RunConfig, hosts: list[str]) -> dict:
    """`[trainer]` updates of a multi-node trainer: torchrun on every trainer node through one
    `srun` step, rendezvous on the head node; {} for a trainer on the head node alone."""
    s = cfg.slurm
    if s.trainer_nodes == 1:
        return {}
    trainer_hosts = split_hosts(cfg, hosts)[0]
    launcher = ["srun", "--overlap", f"--nodes={s.trainer_nodes}",
                f"--ntasks={s.trainer_nodes}", "--ntasks-per-node=1",
                f"--nodelist={','.join(trainer_hosts)}", "--kill-on-bad-exit=1", "--label",
                *gres_args(cfg)]  # fmt: skip
    return {"nodes": s.trainer_nodes, "launcher": launcher,
            "rdzv_endpoint": f"{s.rdzv_host or trainer_hosts[0]}:{s.rdzv_port}"}


def gres_args(cfg: RunConfig) -> list[str]:
    """GPUs of a step: all of its node's (each role picks its own by CUDA_VISIBLE_DEVICES)."""
    n = cfg.slurm.gpus_per_node
    return [f"--gres=gpu:{n}"] if n else []


def head_config(cfg: RunConfig, hosts: list[str]) -> RunConfig:
    """The config `swefleet rl` runs with on the head node: the inference-node servers as
    external servers, a multi-node trainer's launch; validated (ValueError, one line)."""
    from pydantic import ValidationError

    from swefleet.app.config import RunConfig

    data = cfg.model_dump(mode="json")
    if cfg.slurm.inference_nodes:
        data["inference"] = _external(data["inference"], server_urls(cfg, hosts))
    data["trainer"].update(trainer_launch(cfg, hosts))
    try:
        head = RunConfig.model_validate(data)
        resolve_topology(head)
    except ValidationError as e:
        err = e.errors()[0]
        raise ValueError(f"head node config: {'.'.join(map(str, err['loc']))}: {err['msg']}") from e
    return head


_PLACEMENT = ("num_servers", "gpus", "gpus_per_server", "gpu_memory_fraction", "vllm", "port")


def _external(inference: dict, urls: list[str]) -> dict:
    kept = {k: v for k, v in inference.items() if k not in _PLACEMENT}
    return {**kept, "kind": "external", "servers": urls}
