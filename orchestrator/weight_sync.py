"""Weight sync by broadcast seen from the orchestrator (`inference.weight_sync = "nccl"`; the
in-memory hand-off, `"shared_memory"`, needs no group: only its job section comes from here).

The orchestrator sizes the weight-transfer group from the fleet (1 + every server's workers),
picks the rendezvous address and port, and hands them to the trainer in its job
(`weight_sync_job` -> `TrainerJob.weight_sync`). It never joins the group itself: when the
trainer announces a version (`weights/vNNNNNN.nccl.json`), `fleet.update_weights` makes every
server join (once) and receive it, concurrently with the trainer's broadcast.

After an inference server restarted, the group the trainer formed is gone for that server:
`new_group_epoch` announces the same group with the next epoch in `weights/nccl_group.json`; the
trainer joins it before its next broadcast, and the next marker carries it, so every server
joins again (`fleet.init_weight_sync` is idempotent per group: epoch included). The supervisor
calls it through `regroup_after_restart` (`swefleet/app/servers.py` hands it over).
"""

from __future__ import annotations

import json
import logging
import socket
from typing import TYPE_CHECKING, Any

from swefleet.rundir import RunDir, write_json_atomic
from swefleet.weight_transfer import GROUP_FILE, TransferGroup

if TYPE_CHECKING:
    from swefleet.inference.config import InferenceConfig

log = logging.getLogger(__name__)


def free_port(host: str) -> int:
    """A TCP port free on `host` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


async def weight_sync_job(
    inference: InferenceConfig, trainer_device: str, fleet: Any, run_dir: RunDir
) -> dict | None:
    """The trainer job's `weight_sync` section (`trainer.config.WeightSyncJob`), or None when
    versions are published as directories. A group epoch announced by an earlier run of the
    directory is forgotten: this run's group is a new one."""
    (run_dir.weights / GROUP_FILE).unlink(missing_ok=True)
    if inference.weight_sync == "filesystem":
        return None
    vllm = inference.server_api == "vllm"
    cuda = vllm or inference.device.startswith("cuda")
    if cuda and trainer_device == "cpu":
        raise ValueError(f"weight_sync={inference.weight_sync!r} with GPU servers needs the "
                         "trainer on a GPU (trainer.device cpu): use weight_sync='filesystem'")
    if inference.weight_sync == "shared_memory":
        if trainer_device != "cpu" and not cuda:
            raise ValueError("weight_sync='shared_memory' with the trainer on a GPU needs the "
                             "servers on GPUs too (inference.device is cpu)")
        return {"shared": True, "ack_timeout_s": inference.update_timeout_s}
    group = TransferGroup(
        master_address=inference.weight_sync_host,
        master_port=inference.weight_sync_port or free_port(inference.weight_sync_host),
        world_size=await fleet.weight_sync_world_size(),
        protocol="vllm" if vllm else "torch",
        backend="nccl" if cuda else "gloo",
        timeout_s=inference.weight_sync_timeout_s,
    )
    return {"group": group.model_dump(mode="json")}


def current_group(run_dir: RunDir) -> TransferGroup | None:
    """The group the trainer broadcasts to now (the newest epoch announced, else its job's)."""
    newer = run_dir.weights / GROUP_FILE
    if newer.exists():
        return TransferGroup.model_validate_json(newer.read_bytes())
    job = run_dir.root / "trainer_job.json"
    if not job.exists():
        return None
    sync = json.loads(job.read_text()).get("weight_sync")
    return None if sync is None else TransferGroup.model_validate(sync["group"])


def new_group_epoch(run_dir: RunDir, world_size: int | None = None) -> TransferGroup:
    """Announce the next epoch of the trainer's group (optionally for a new `world_size`);
    the trainer and every server join it at the next broadcast."""
    group = current_group(run_dir)
    if group is None:
        raise ValueError(f"{run_dir.root}: the trainer does not broadcast its weights")
    update: dict = {"epoch": group.epoch + 1}
    if world_size is not None:
        update["world_size"] = world_size
    group = group.model_copy(update=update)
    write_json_atomic(run_dir.weights / GROUP_FILE, group.model_dump(mode="json"))
    return group


def regroup_after_restart(run_dir: RunDir) -> TransferGroup | None:
    """An inference server died and is restarted: announce the next group epoch, if the
    trainer broadcasts (None when it does not, or has not started yet)."""
    if current_group(run_dir) is None:
        return None
    group = new_group_epoch(run_dir)
    log.info("weight-transfer group epoch %d announced (an inference server restarts)",
             group.epoch)
    return group
