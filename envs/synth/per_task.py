"""Run one sandboxed job per task, a few at a time, sharing one Docker client."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from swefleet.types import Task

T = TypeVar("T")


async def per_task(tasks: list[Task], job: Callable[[Task, object], Awaitable[T]],
                   concurrency: int = 2, on_done: Callable[[T], None] | None = None) -> list[T]:
    """`job(task, client)` for every task, `concurrency` at a time, results in task order.
    `on_done(result)` runs as each job ends (in the order they end), so a caller can save each
    task's result at once and a run stopped half-way keeps what it finished."""
    from swefleet.envs.containers import docker_client

    client = docker_client()
    gate = asyncio.Semaphore(concurrency)

    async def one(task: Task) -> T:
        async with gate:
            result = await job(task, client)
        if on_done is not None:
            on_done(result)
        return result

    return await asyncio.gather(*(one(t) for t in tasks))
