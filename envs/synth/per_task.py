"""Run one sandboxed job per task, a few at a time, sharing one Docker client."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from swefleet.types import Task

T = TypeVar("T")


async def per_task(tasks: list[Task], job: Callable[[Task, object], Awaitable[T]],
                   concurrency: int = 2) -> list[T]:
    """`job(task, client)` for every task, `concurrency` at a time, results in task order."""
    from swefleet.envs.containers import docker_client

    client = docker_client()
    gate = asyncio.Semaphore(concurrency)

    async def one(task: Task) -> T:
        async with gate:
            return await job(task, client)

    return await asyncio.gather(*(one(t) for t in tasks))
