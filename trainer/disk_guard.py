"""Low disk pauses the trainer's writes instead of failing them half-way.

Before a checkpoint or a weights export, rank 0 checks that the filesystem keeps
`trainer.disk_min_free_gb` free once the write is done; every rank follows rank 0's verdict
(broadcast over a gloo group of its own), so the ranks agree. A checkpoint without room is
skipped (the next one is tried as usual; the previous one stays); an export without room waits,
rechecking every `RECHECK_S` seconds, until there is room again (the run then goes on where it
stopped) or the trainer is told to stop. Each skip or pause logs a warning and counts in
`disk_paused_saves`; `disk_free_gb` reports the free space at every step. No write is started
that the disk is not expected to hold, and one cut by a full disk anyway leaves only a `.tmp-`
entry: never a torn version or checkpoint.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from swefleet.diskspace import GB, free_bytes

log = logging.getLogger(__name__)

RECHECK_S = 10.0
"""How often a paused export looks at the free space again."""
LOW_DISK = "low disk:"
"""Starts the warning of a skipped or paused write (the orchestrator reads it in the log)."""
PAUSED = "paused until there is room"
"""In the warning of a paused export."""
ROOM_AGAIN = "disk: room again"
"""Starts the message that a paused export goes on."""


class DiskGuard:
    """The free-space check of one trainer; every rank makes one and calls it at the same
    points of the loop (with several ranks each call is a collective)."""

    def __init__(self, min_free_gb: float, world: int = 1, recheck_s: float | None = None) -> None:
        import torch.distributed as dist

        self.min_free = min_free_gb * GB
        self.recheck_s = recheck_s or RECHECK_S
        self.group = dist.new_group(backend="gloo") if world > 1 else None
        self.rank = dist.get_rank() if world > 1 else 0
        self.paused = 0
        """Checkpoints skipped and exports paused for low disk."""
        self.free: int | None = None
        """Free bytes at the last check (rank 0)."""

    def _verdict(self, path: Path, need: int, stopped: bool = False) -> tuple[bool, bool]:
        """(room for `need` more bytes under `path`, told to stop), as rank 0 sees them."""
        verdict = [None]
        if self.rank == 0:
            self.free = free_bytes(path)
            verdict = [(self.free - need >= self.min_free, stopped)]
        if self.group is not None:
            import torch.distributed as dist

            dist.broadcast_object_list(verdict, src=0, group=self.group)
        return verdict[0]

    def room(self, path: Path, need: int, what: str) -> bool:
        """Whether `what` (`need` bytes under `path`) may be written now; a warning when not."""
        ok, _ = self._verdict(path, need)
        if not ok:
            self.paused += 1
            self._warn(path, need, f"{what} skipped")
        return ok

    def wait_for_room(self, path: Path, need: int, what: str, stop: threading.Event) -> bool:
        """Until `what` (`need` bytes under `path`) may be written (True) or `stop` is set
        while waiting (False)."""
        ok, stopped = self._verdict(path, need, stop.is_set())
        if ok:
            return True
        self.paused += 1
        self._warn(path, need, f"{what} {PAUSED} (checked every {self.recheck_s:g} s)")
        while not ok and not stopped:
            stop.wait(self.recheck_s)
            ok, stopped = self._verdict(path, need, stop.is_set())
        if ok:
            log.warning("%s (%.2f GB free): %s goes on", ROOM_AGAIN, self._free_gb(), what)
        return ok

    def _warn(self, path: Path, need: int, outcome: str) -> None:
        if self.rank == 0:
            log.warning("%s %.2f GB free on the filesystem of %s, %.2f GB needed and "
                        "trainer.disk_min_free_gb=%g kept free: %s", LOW_DISK, self._free_gb(), path,
                        need / GB, self.min_free / GB, outcome)

    def _free_gb(self) -> float | None:
        return None if self.free is None else self.free / GB

    def metrics(self, path: Path) -> dict[str, float | int]:
        """`disk_free_gb` (now, under `path`) and `disk_paused_saves` (so far); rank 0 only."""
        self.free = free_bytes(path)
        return {"disk_free_gb": self.free / GB, "disk_paused_saves": self.paused}
