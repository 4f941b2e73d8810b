"""One progress bar on stderr for a stage of work (oracle or expert episodes, SFT steps); plain
lines instead on a file or pipe (`swefleet/console.py`)."""

from __future__ import annotations


class StageBar:
    """A rich progress bar on stderr (one task)."""

    def __init__(self, label: str, total: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

        from swefleet.console import make_progress

        self.progress = make_progress(TextColumn("{task.description}"), BarColumn(),
                                      MofNCompleteColumn(), TimeElapsedColumn())
        self.task = self.progress.add_task(label, total=total)
        self.progress.start()

    def advance(self) -> None:
        self.progress.advance(self.task)

    def set(self, done: int, label: str) -> None:
        self.progress.update(self.task, completed=done, description=label)

    def close(self) -> None:
        self.progress.stop()
