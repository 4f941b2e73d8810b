"""The two sandbox backends for tests that run on both: a sandbox of either, and a skip when
bwrap cannot run here."""

from __future__ import annotations

import pytest
from swefleet.envs.config import FarmConfig

from swefleet.types import Task

BACKENDS = ["docker", "bwrap"]


def require(backend: str) -> str:
    """`backend`, or a skip when it is bwrap and bwrap (or its helpers) is missing."""
    if backend == "bwrap":
        from swefleet.envs.bwrap.box import BwrapMissing, check_tools

        try:
            check_tools()
        except BwrapMissing as e:
            pytest.skip(f"bwrap backend unavailable: {e}")
    return backend


async def make_sandbox(backend: str, task: Task, run_id: str, config: FarmConfig):
    """A started `DockerSandbox` or `BwrapSandbox` of `task`, with `config`'s limits."""
    if backend == "bwrap":
        from swefleet.envs.bwrap.sandbox import BwrapSandbox

        return await BwrapSandbox.create(task.image, run_id=run_id, config=config,
                                         workdir=task.workdir, instance_id=task.instance_id)
    from swefleet.envs.containers import docker_client
    from swefleet.envs.sandbox import DockerSandbox

    return await DockerSandbox.create(docker_client(), task.image, run_id=run_id, config=config,
                                      workdir=task.workdir, instance_id=task.instance_id)
