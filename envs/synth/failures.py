"""Read pytest's FAILURES section: per failing test, the failing call, the error and the frames.

Works on `pytest -rA` output with the default (long) traceback style, as the grader logs it.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass, field

from swefleet.envs import safe_ast
from swefleet.envs.canary_ids import node_parts

_SECTION = re.compile(r"^=+ (FAILURES|ERRORS) =+$")
_OTHER_SECTION = re.compile(r"^=+ .* =+$")
_HEADER = re.compile(r"^_{3,} (.+?) _{3,}$")
_FRAME_SEP = re.compile(r"^(_ )+_?\s*$")
_LOCATION = re.compile(r"^(\S+\.py):(\d+): ?(.*)$")
_CAPTURED = re.compile(r"^-+ Captured (stdout|stderr|log) (call|setup|teardown) -+$")


@dataclass
class Frame:
    path: str
    line: int
    tail: str
    """After `path:line: `: `in func` (short frame), an exception type (last frame) or ''."""
    code: str = ""
    """The frame's failing statement (its `>` lines), dedented; '' when none or unparsable."""


@dataclass
class Failure:
    """One failing test's report."""

    header: str
    """`test_x[p]` or `TestClass.test_x`: the test's name as pytest prints it."""
    error: list[str] = field(default_factory=list)
    """The `E` lines, dedented."""
    frames: list[Frame] = field(default_factory=list)
    captured: list[str] = field(default_factory=list)
    """What the test printed (pytest's `Captured stdout call` section)."""

    @property
    def exc_type(self) -> str:
        return self.frames[-1].tail if self.frames and self.frames[-1].tail else ""

    def code_in(self, paths: set[str]) -> str:
        """The failing statement of the first frame in one of `paths` (the test's own code;
        chained exceptions start their tracebacks in package code)."""
        return next((f.code for f in self.frames if f.path in paths and f.code), "")


def failure_blocks(output: str) -> dict[str, list[str]]:
    """Header -> the lines of its report, from the FAILURES and ERRORS sections."""
    blocks: dict[str, list[str]] = {}
    current: list[str] | None = None
    inside = False
    for line in output.splitlines():
        if _SECTION.match(line):
            inside, current = True, None
        elif _OTHER_SECTION.match(line) and not _HEADER.match(line):
            inside, current = False, None
        elif inside and (m := _HEADER.match(line)):
            current = blocks.setdefault(m.group(1), [])
        elif inside and current is not None:
            current.append(line)
    return blocks


def parse_failure(header: str, lines: list[str]) -> Failure:
    """A frame ends at its `path:line: ...` line (chained exceptions put a second traceback
    right after the first one, with no separator in between)."""
    failure = Failure(header)
    current: list[str] = []
    section = ""
    for line in lines:
        if m := _CAPTURED.match(line):
            section = f"{m.group(1)} {m.group(2)}"
            continue
        if section:
            if section == "stdout call":
                failure.captured.append(line)
            continue
        loc = _LOCATION.match(line)
        if loc:
            failure.frames.append(Frame(loc.group(1), int(loc.group(2)), loc.group(3).strip(),
                                        _failing_statement(current)))
            current = []
        elif _FRAME_SEP.match(line):
            current = []
        else:
            current.append(line)
    end = next((i for i, line in enumerate(lines) if _CAPTURED.match(line)), len(lines))
    error = [line[1:] for line in lines[:end] if line.startswith("E ")]
    failure.error = textwrap.dedent("\n".join(error)).splitlines()
    return failure


def _failing_statement(frame: list[str]) -> str:
    """The `>` line of the test's own frame plus its continuation lines, if it parses."""
    start = next((i for i, line in enumerate(frame) if line.startswith(">")), None)
    if start is None:
        return ""
    stmt = [" " + frame[start][1:]]
    for line in frame[start + 1 :]:
        if line.startswith(("E ", ">")) or not line.strip() or _LOCATION.match(line):
            break
        stmt.append(line)
    code = textwrap.dedent("\n".join(stmt)).strip()
    try:
        safe_ast.parse(code)
    except SyntaxError:
        return ""
    return code


def header_of(test_id: str) -> str:
    """The FAILURES header pytest prints for a test id: `Class.test_x[p]`."""
    return ".".join(node_parts(test_id)[1:])
