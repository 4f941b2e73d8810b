"""The environment room's seams: a sandbox to act in, a farm that hands sandboxes out, a grader."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Protocol

from pydantic import BaseModel

from swefleet.types import GradeResult, Task


class InfraError(Exception):
    """The infrastructure failed (daemon error, container died). Never a model failure."""


class DiskBudgetExceeded(Exception):
    """The agent's writes took the sandbox past its disk budget (`SandboxLimits.disk_budget_mb`)
    and the farm removed it. A policy failure, deliberately not an `InfraError`: the agent loop
    ends the episode with `EpisodeStatus.limit_disk`."""


class RepositoryBroken(Exception):
    """The agent left the workdir's git repository unusable (removed or corrupted `.git`), so no
    patch can be taken. A policy failure, deliberately not an `InfraError` (that would mask the
    episode and let a failing policy escape its 0): the agent loop grades an empty patch."""


class CommandResult(BaseModel):
    """Result of one shell command in a sandbox."""

    output: str
    """stdout+stderr, decoded with replacement, head+tail capped with a marker when cut."""
    exit_code: int | None
    """None when the command timed out and was killed."""
    timed_out: bool = False
    truncated_bytes: int = 0
    """How many bytes of output were cut from the middle."""
    duration_s: float = 0.0


class Sandbox(Protocol):
    """A running container with a persistent shell session (cwd/env persist between commands)."""

    workdir: str
    """The repository's folder, where the shell starts (absolute, inside the sandbox)."""

    async def run(self, command: str, timeout_s: float | None = None) -> CommandResult: ...

    async def read_file(self, path: str) -> bytes: ...

    async def write_file(self, path: str, data: bytes) -> None:
        """Write `data` to `path`; an existing file keeps its mode, a new one is 0644."""
        ...

    async def diff(self) -> str:
        """`git diff` of the working tree against the base state (the model patch)."""
        ...


class Farm(Protocol):
    """Hands out sandboxes for an image; `async with farm.acquire(task) as sb: ...`."""

    def acquire(self, task: Task) -> AbstractAsyncContextManager[Sandbox]: ...

    async def close(self) -> None: ...


class Grader(Protocol):
    """Grades a patch for a task in a fresh container, independent of the agent's sandbox."""

    async def grade(self, task: Task, model_patch: str) -> GradeResult: ...
