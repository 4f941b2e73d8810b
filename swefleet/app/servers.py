"""The inference fleet of a run (`swefleet rl`, `swefleet eval --agent model`) from its topology:
launched (embedded or vLLM) or external servers, one fleet client over all of them, and the
supervisor that restarts dead ones; everything is stopped by the caller's exit stack."""

from __future__ import annotations

import asyncio
import functools
from contextlib import AsyncExitStack
from pathlib import Path
from typing import TYPE_CHECKING

from swefleet.app.topology import resolve_topology

if TYPE_CHECKING:
    from swefleet.app.config import RunConfig
    from swefleet.inference.fleet import FleetClient
    from swefleet.inference.supervisor import Supervisor
    from swefleet.rundir import RunDir


def check_launchable(cfg: RunConfig) -> None:
    """Before any setup (run directory, model, tasks): ValueError (one line) when the servers
    the topology launches cannot start here (kind `vllm` without a `vllm` executable)."""
    from swefleet.inference.vllm_launch import missing_executable

    kind = resolve_topology(cfg).kind
    if kind == "vllm" and (problem := missing_executable(cfg.inference.vllm.executable)):
        raise ValueError(problem)


async def open_fleet(
    cfg: RunConfig,
    model_dir: str | Path,
    log_dir: Path,
    stack: AsyncExitStack,
    *,
    scrape_metrics: bool | None = None,
    run_dir: RunDir | None = None,
) -> tuple[FleetClient, Supervisor]:
    """Start (or check) the servers, then the client and the supervisor; `model_dir` is served
    as policy version 0 (call `supervisor.update_weights` to move every server on). `run_dir`:
    the RL run whose trainer may broadcast its weights (a restart re-forms its group)."""
    from swefleet.inference.fleet import FleetClient
    from swefleet.inference.fleet_launch import ServerFleet
    from swefleet.inference.supervisor import Supervisor

    topo = resolve_topology(cfg)
    servers = ServerFleet(topo.kind, topo.servers, cfg.inference, log_dir)
    stack.push_async_callback(asyncio.to_thread, servers.stop)
    urls = await servers.start(model_dir)
    client_cfg = cfg.inference
    if scrape_metrics is not None and cfg.inference.scrape_metrics is None:
        client_cfg = cfg.inference.model_copy(update={"scrape_metrics": scrape_metrics})
    fleet = FleetClient(urls, client_cfg)
    stack.push_async_callback(fleet.aclose)
    regroup = None
    if run_dir is not None and cfg.inference.weight_sync == "nccl":
        from swefleet.orchestrator.weight_sync import regroup_after_restart

        regroup = functools.partial(regroup_after_restart, run_dir)
    supervisor = Supervisor(servers, fleet, cfg.inference, model_dir, new_group_epoch=regroup)
    stack.push_async_callback(supervisor.aclose)
    supervisor.start()
    return fleet, supervisor
