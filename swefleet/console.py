"""The project's rich consoles: fitted to the terminal on a TTY; on a file or a pipe (`make run >
log`, CI, nohup, Slurm) plain lines, never wrapped or cut, without colour codes or progress bars.

Every console, banner and progress bar the command line prints goes through this module.
"""

from __future__ import annotations

import sys
import time
from typing import IO

PLAIN_WIDTH = 100_000
"""Width of a console writing to a file or pipe: wide enough that no line or table cell is cut."""
PLAIN_PROGRESS_EVERY_S = 60.0
"""On a file or pipe, a progress line at most this often (and one when the work ends)."""


def is_tty(stream: IO[str]) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def make_console(stderr: bool = False, file: IO[str] | None = None):
    """A rich Console on `file` (default stdout, or stderr with `stderr`): the terminal's width
    and styles on a TTY; otherwise no colour, no wrapping, and tables at their full width."""
    from rich.console import Console

    stream = file if file is not None else (sys.stderr if stderr else sys.stdout)
    if is_tty(stream):
        return Console(file=stream)
    return Console(file=stream, force_terminal=False, color_system=None, width=PLAIN_WIDTH,
                   soft_wrap=True, highlight=False)


def banner(console, text: str) -> None:
    """A stage's banner: a rule across the terminal when `text` fits in one; otherwise (a file,
    or a long text) the whole text on one line between dashes."""
    from rich.text import Text

    if console.is_terminal and Text.from_markup(text).cell_len + 6 <= console.width:
        console.rule(text)
    else:
        console.print(f"── {text} ──", soft_wrap=True)  # the terminal wraps it, uncut


def make_progress(*columns, stderr: bool = True, every_s: float = PLAIN_PROGRESS_EVERY_S,
                  **kwargs):
    """A rich Progress: a bar on a TTY; on a file or pipe no bar, but a plain line per task
    (`label: 3/10 in 42s`) at most every `every_s` seconds and when it stops."""
    from rich.progress import Progress

    class PlainLinesProgress(Progress):
        def advance(self, task_id, advance: float = 1) -> None:
            super().advance(task_id, advance)
            self._tick()

        def update(self, task_id, **fields) -> None:
            super().update(task_id, **fields)
            self._tick()

        def stop(self) -> None:
            super().stop()
            if self.disable:
                self._say()

        def _tick(self) -> None:
            if self.disable and time.monotonic() - self.said_at >= every_s:
                self._say()

        def _say(self) -> None:
            self.said_at = time.monotonic()
            for task in self.tasks:
                total = "" if task.total is None else f"/{task.total:g}"
                elapsed = task.finished_time if task.finished else task.elapsed
                self.console.print(f"{task.description}: {task.completed:g}{total} in "
                                   f"{elapsed or 0.0:.0f}s", markup=False)

    console = make_console(stderr=stderr)
    progress = PlainLinesProgress(*columns, console=console, disable=not console.is_terminal,
                                  **kwargs)
    progress.said_at = time.monotonic()
    return progress
