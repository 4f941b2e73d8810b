"""Disk budget watchdog: removes sandboxes whose writable layer outgrew `disk_budget_mb`.

`RLIMIT_FSIZE` (`max_file_mb`) bounds one file and `--storage-opt size=` (`disk_mb`) needs a
storage driver that most hosts lack, so many files under the per-file cap could still fill the
host disk. The farm runs `DiskWatchdog.check` every `FarmConfig.disk_check_interval_s` over the
sandboxes it has handed out: one Docker call per host measures every container of the run there,
off the event loop; the command fast path is untouched. A sandbox over budget is removed at once (its disk is
freed) and its running and later operations raise `envs.protocol.DiskBudgetExceeded`, which the
agent loop turns into the `limit_disk` status: the agent's doing, not an infrastructure failure.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from swefleet.envs import containers

if TYPE_CHECKING:
    from swefleet.envs.sandbox import DockerSandbox

log = logging.getLogger(__name__)

MIB = 1024 * 1024


class DiskWatchdog:
    """The sandboxes in use of one run, and the check that removes those over their budget."""

    def __init__(self, client: Callable[[], Any], run_id: str) -> None:
        self._client = client
        self.run_id = run_id
        self._watched: dict[str, DockerSandbox] = {}
        self.checks = 0

    def watch(self, sb: DockerSandbox) -> None:
        """Measure `sb` from the next check on (no-op when its budget is off)."""
        if sb.limits.disk_budget_mb is not None:
            self._watched[sb.container_id] = sb

    def unwatch(self, sb: DockerSandbox) -> None:
        self._watched.pop(sb.container_id, None)

    def __len__(self) -> int:
        return len(self._watched)

    async def check(self) -> list[DockerSandbox]:
        """Measure every watched sandbox; remove (and stop watching) those over budget.
        Returns the removed ones. Docker errors of the measurement propagate."""
        if not self._watched:
            return []
        sizes = await self._measure()
        self.checks += 1
        over = []
        for cid, sb in list(self._watched.items()):
            used, budget = sizes.get(cid, 0), sb.limits.disk_budget_mb
            if budget is not None and used > budget * MIB:
                self.unwatch(sb)
                over.append((sb, _reason(used, budget)))
        results = await asyncio.gather(
            *(sb.kill_over_budget(why) for sb, why in over), return_exceptions=True
        )
        for (sb, _), result in zip(over, results, strict=True):
            if isinstance(result, BaseException):  # marked anyway; the reaper removes it later
                log.warning("could not remove %s: %s", sb.container_id[:12], result)
        return [sb for sb, _ in over]


    async def _measure(self) -> dict[str, int]:
        """Writable-layer sizes of the watched sandboxes: one call per Docker host (the
        sandboxes' own clients; the watchdog's client for a sandbox without one). A host that
        fails its call is skipped (the farm's health check deals with it) unless it is the only
        one, whose error propagates."""
        own = [getattr(sb, "client", None) for sb in self._watched.values()]
        clients = {id(cl): cl for cl in own if cl is not None}
        clients = clients or {0: self._client()}
        results = await asyncio.gather(
            *(asyncio.to_thread(containers.writable_sizes, cl, self.run_id)
              for cl in clients.values()),
            return_exceptions=True,
        )
        sizes: dict[str, int] = {}
        for result in results:
            if isinstance(result, BaseException):
                if len(results) == 1:
                    raise result
                log.warning("disk check of a host failed: %s: %s", type(result).__name__, result)
            else:
                sizes.update(result)
        return sizes


def _reason(used: int, budget_mb: int) -> str:
    return (
        f"disk budget exceeded: the sandbox's writable layer holds {used / MIB:.0f} MiB, "
        f"over its disk_budget_mb of {budget_mb} MiB; the sandbox was removed"
    )
