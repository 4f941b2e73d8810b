"""The farm and grader of the configured sandbox backend (`FarmConfig.backend`)."""

from __future__ import annotations

import os
from typing import Any

from swefleet.envs.config import FarmConfig


def make_farm(run_id: str, config: FarmConfig) -> Any:
    """`DockerFarm` or `BwrapFarm` (both the `Farm` protocol, with `start`/`close`)."""
    if config.backend == "bwrap":
        from swefleet.envs.bwrap.farm import BwrapFarm

        return BwrapFarm(run_id, config)
    from swefleet.envs.farm import DockerFarm
    from swefleet.envs.hosts import shared_hosts

    return DockerFarm(run_id, config, hosts=shared_hosts(run_id, config))


def make_grader(run_id: str, config: FarmConfig, timeout_s: float | None = None) -> Any:
    """`DockerGrader` or `BwrapGrader` (the `Grader` protocol, with `close`), with the
    resources of `config.grading` (`timeout_s` overrides its deadline) and, on Docker,
    `config.image_user`."""
    g = config.grading
    timeout = g.timeout_s if timeout_s is None else timeout_s
    if config.backend == "bwrap":
        from swefleet.envs.bwrap.grading import BwrapGrader

        limits = config.limits.model_copy(update={"memory_mb": g.memory_mb,
                                                  "pids_limit": g.pids_limit})
        return BwrapGrader(run_id, timeout, config=g, bwrap=config.bwrap, limits=limits,
                           max_parallel=g.parallelism)
    from swefleet.envs.grading import DockerGrader
    from swefleet.envs.hosts import shared_hosts

    local = not config.hosts and not os.environ.get("DOCKER_HOST")
    if local and g.cpus > (os.cpu_count() or 1):  # Docker would refuse every grading container
        raise ValueError(f"envs.grading.cpus: {g.cpus:g} cores asked, but the local Docker "
                         f"engine's machine has {os.cpu_count()}")
    return DockerGrader(run_id, timeout, config=g, hosts=shared_hosts(run_id, config),
                        mem_limit=f"{g.memory_mb}m", cpus=g.cpus, pids_limit=g.pids_limit,
                        max_parallel=g.parallelism, image_user=config.image_user)
