"""The farm and grader of the configured sandbox backend (`FarmConfig.backend`)."""

from __future__ import annotations

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


def make_grader(run_id: str, config: FarmConfig) -> Any:
    """`DockerGrader` or `BwrapGrader` (the `Grader` protocol, with `close`)."""
    if config.backend == "bwrap":
        from swefleet.envs.bwrap.grading import BwrapGrader

        return BwrapGrader(run_id, config=config.grading, bwrap=config.bwrap,
                           limits=config.limits)
    from swefleet.envs.grading import DockerGrader
    from swefleet.envs.hosts import shared_hosts

    return DockerGrader(run_id, config=config.grading, hosts=shared_hosts(run_id, config))
