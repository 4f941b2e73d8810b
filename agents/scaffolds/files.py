"""File tools over `Sandbox.read_file` / `write_file`: a line-numbered view and an exact,
unique string replacement.

Binary-safe: edits work on bytes (old/new strings are UTF-8 encoded), so bytes that are not
valid UTF-8 elsewhere in the file, line endings and a missing final newline are kept exactly.
Problems the model can fix (missing file, a directory, a binary file, a bad line range,
`old_str` absent or not unique) raise `ToolError`, shown as the tool's result; sandbox failures
(`envs.protocol.InfraError`) and timeouts propagate as infrastructure errors.
"""

from __future__ import annotations

import asyncio
import difflib
import re
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TypeVar

from swefleet.envs.protocol import InfraError, Sandbox

T = TypeVar("T")

#: Lines shown before and after an edit in its result.
SNIPPET_CONTEXT_LINES = 3
_NUMBERED = re.compile(r"^\s*\d+\t")


class ToolError(Exception):
    """A well-formed tool call that failed; its message is shown to the model."""


@dataclass
class NumberedText:
    """Lines `first..last` (1-based, inclusive) of a file with `total` lines, numbered."""

    path: str
    text: str
    first: int
    last: int
    total: int
    valid_utf8: bool = True


async def view_file(
    sandbox: Sandbox, path: str, view_range: list[int] | None, timeout_s: float
) -> NumberedText:
    """The file's lines `view_range = [start, end]` (end -1 or past the end: to the end), numbered."""
    data = await read_bytes(sandbox, path, timeout_s)
    if b"\0" in data:
        raise ToolError(f"{path} is a binary file ({len(data)} bytes); it cannot be viewed")
    lines = split_lines(data)
    first, last = _line_range(view_range, len(lines))
    return NumberedText(
        path=path,
        text=number_lines(lines[first - 1 : last], first),
        first=first,
        last=last,
        total=len(lines),
        valid_utf8=_is_utf8(data),
    )


async def replace_once(
    sandbox: Sandbox, path: str, old_str: str, new_str: str, timeout_s: float
) -> NumberedText:
    """Replace the one occurrence of `old_str` with `new_str`; returns a numbered snippet of
    the edited region."""
    if not old_str:
        raise ToolError("old_str is empty; give the exact text to replace")
    if old_str == new_str:
        raise ToolError("old_str and new_str are identical; nothing would change")
    data = await read_bytes(sandbox, path, timeout_s)
    old, new = old_str.encode(), new_str.encode()
    found = occurrences(data, old)
    if not found:
        raise ToolError(f"old_str was not found in {path}; it must match the file exactly. "
                        + not_found_hint(data, old_str))
    if len(found) > 1:
        lines = ", ".join(str(data.count(b"\n", 0, i) + 1) for i in found[:10])
        raise ToolError(
            f"old_str occurs {len(found)} times in {path} (starting on lines {lines}); "
            "include more surrounding text so that it is unique"
        )
    at = found[0]
    edited = data[:at] + new + data[at + len(old) :]
    await _bounded(sandbox.write_file(path, edited), path, "write", timeout_s)
    return _snippet(path, edited, at, len(new))


def not_found_hint(data: bytes, old_str: str) -> str:
    """What is likely wrong with an `old_str` that is not in the file: line numbers copied from
    `view`, other indentation (the line where it would match), or the closest line."""
    old_lines = [line for line in old_str.split("\n") if line.strip()]
    if old_lines and all(_NUMBERED.match(line) for line in old_lines):
        return ("It starts with line numbers as `view` shows them: give only the file's text "
                "after the tab.")
    lines = split_lines(data)
    stripped = [line.strip() for line in lines]
    wanted = [line.strip() for line in old_str.split("\n")]
    while wanted and not wanted[0]:
        wanted.pop(0)
    for n in range(len(lines) - len(wanted) + 1) if wanted else ():
        if stripped[n : n + len(wanted)] == wanted:
            return (f"It matches line {n + 1} if indentation is ignored: copy the spaces "
                    f"exactly (view lines {n + 1}-{n + len(wanted)}).")
    close = difflib.get_close_matches(wanted[0], stripped, n=1, cutoff=0.6) if wanted else []
    if close:
        n = stripped.index(close[0]) + 1
        return (f"The closest line is {n}: `{close[0][:120]}`. View the lines around it and copy "
                "old_str from there.")
    return "View the lines you want to change and copy them exactly, indentation included."


async def read_bytes(sandbox: Sandbox, path: str, timeout_s: float) -> bytes:
    """The file's bytes; a path that does not exist is a `ToolError` that names the
    repository's files with the same name, if any (`similar_files`)."""
    try:
        return await _bounded(sandbox.read_file(path), path, "read", timeout_s)
    except ToolError as error:
        if not isinstance(error.__cause__, FileNotFoundError):
            raise
        similar = await similar_files(sandbox, path, timeout_s)
        if not similar:
            raise
        raise ToolError(f"{error}; the repository has {', '.join(similar)}") from error


MAX_SIMILAR = 3
"""Most files `similar_files` names."""


async def similar_files(sandbox: Sandbox, path: str, timeout_s: float) -> list[str]:
    """Tracked files of the repository named like `path` (a small model often guesses
    `pkg.py` for `pkg/__init__.py`, or the wrong folder): the same file name, else a package
    folder of that name, else a file name starting with its stem; [] when git cannot list."""
    result = await sandbox.run("git ls-files", timeout_s=timeout_s)
    if result.exit_code != 0 or result.truncated_bytes:
        return []
    files = [line for line in result.output.splitlines() if line.strip()]
    name = PurePosixPath(path).name
    stem = PurePosixPath(name).stem
    for match in (lambda f: PurePosixPath(f).name == name,
                  lambda f: f.endswith(f"{stem}/__init__.py"),
                  lambda f: PurePosixPath(f).name.startswith(stem) and f.endswith(".py")):
        found = sorted((f for f in files if match(f)), key=lambda f: (len(f), f))
        if found and stem:
            return found[:MAX_SIMILAR]
    return []


async def _bounded(step: Awaitable[T], path: str, verb: str, timeout_s: float) -> T:
    """Await a file operation within `timeout_s`; file problems become `ToolError`."""
    try:
        async with asyncio.timeout(timeout_s):
            return await step
    except TimeoutError as exc:  # an OSError subclass: must come first
        raise InfraError(f"{verb} {path}: no answer within {timeout_s:g}s") from exc
    except FileNotFoundError as exc:
        raise ToolError(f"{path} does not exist") from exc
    except IsADirectoryError as exc:
        raise ToolError(f"{path} is a directory; list it with the bash tool") from exc
    except NotADirectoryError as exc:
        raise ToolError(f"a parent of {path} is not a directory") from exc
    except PermissionError as exc:
        raise ToolError(f"permission denied: cannot {verb} {path}") from exc
    except OSError as exc:
        raise ToolError(f"cannot {verb} {path}: {exc}") from exc


def occurrences(data: bytes, needle: bytes) -> list[int]:
    """Start offsets of every occurrence of `needle`, overlapping ones included."""
    found: list[int] = []
    at = data.find(needle)
    while at != -1:
        found.append(at)
        at = data.find(needle, at + 1)
    return found


def split_lines(data: bytes) -> list[str]:
    """Lines split on `\\n` only (a final newline ends the last line, it starts none)."""
    if not data:
        return []
    text = data.decode("utf-8", errors="replace")
    lines = text.split("\n")
    return lines[:-1] if text.endswith("\n") else lines


def number_lines(lines: list[str], first: int) -> str:
    """`cat -n` style: right-aligned line number, a tab, the line."""
    return "\n".join(f"{n:6}\t{line}" for n, line in enumerate(lines, start=first))


def _line_range(view_range: list[int] | None, total: int) -> tuple[int, int]:
    if view_range is None:
        return 1, total
    start, end = view_range
    if end == -1 or start <= end > total:
        end = total  # past the end: to the end
    if start < 1 or (total and start > total) or end < start or end > total:
        raise ToolError(
            f"view_range {view_range} is invalid for a file of {total} lines: use "
            f"[start, end] with 1 <= start <= end <= {total}, or end = -1 for the rest"
        )
    return start, end


def _snippet(path: str, data: bytes, at: int, length: int) -> NumberedText:
    lines = split_lines(data)
    start_line = data.count(b"\n", 0, at) + 1
    end_line = data.count(b"\n", 0, at + length) + 1
    first = max(1, start_line - SNIPPET_CONTEXT_LINES)
    last = min(len(lines), end_line + SNIPPET_CONTEXT_LINES)
    return NumberedText(
        path=path,
        text=number_lines(lines[first - 1 : last], first),
        first=first,
        last=last,
        total=len(lines),
        valid_utf8=_is_utf8(data),
    )


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
