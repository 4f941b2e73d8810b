"""Timed steps, each with a rich progress bar on a terminal (stderr) and nothing on a pipe.

Every step records its duration (`Steps.seconds`) and prints one line when it ends, so a pull
logged to a file still says what took how long.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from swefleet.console import is_tty


class Steps:
    """`with steps.step("download", total=22, unit="parts") as advance: ... advance(1)`."""

    def __init__(self, bars: bool | None = None, say: Callable[[str], None] = print) -> None:
        self.bars = is_tty(sys.stderr) if bars is None else bars
        self.say = say
        self.seconds: dict[str, float] = {}

    @contextmanager
    def step(self, label: str, total: float,
             unit: str = "bytes") -> Iterator[Callable[[float], None]]:
        """Yields `advance(n)`; the bar counts bytes (`unit="bytes"`) or items of `unit`."""
        start = time.monotonic()
        bar = _bar(label, total, unit) if self.bars else None
        task = bar.add_task(label, total=total) if bar else None
        if bar:
            bar.start()
        try:
            yield (lambda n: bar.advance(task, n)) if bar else (lambda n: None)
        finally:
            if bar:
                bar.stop()
        self.seconds[label] = time.monotonic() - start
        self.say(f"{label}: {self.seconds[label]:.1f} s")


def _bar(label: str, total: float, unit: str):
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TransferSpeedColumn,
    )

    from swefleet.console import make_console

    counts = [DownloadColumn(), TransferSpeedColumn()] if unit == "bytes" else [
        MofNCompleteColumn(), TextColumn(unit)]
    return Progress(TextColumn("{task.description}"), BarColumn(), *counts, TimeElapsedColumn(),
                    console=make_console(stderr=True))
