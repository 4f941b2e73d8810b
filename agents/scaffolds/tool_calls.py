"""Qwen3-style tool calls: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` in the
reply text, checked against the tool schemas in `agents/prompts/tools/tools.json`.

Exactly one call per reply. Small models often drop or misspell the tags: a reply whose
`<tool_call>` is never closed counts when what follows the tag is one whole JSON object and
nothing else but one misspelt closing tag (`[/tool_call]`, `</tool_response>`, `[/code]`,
`</tool_call` without `>`: an SFT'd Qwen2.5-Coder-1.5B writes them, docs/benchmarks.md), and
a reply with no tags counts when exactly one JSON object with a string "name" starts one of
its lines (several such objects are several calls). A raw newline or tab inside a JSON string
is taken as written, and arguments given to `submit` (which takes none) are ignored.
Everything else that keeps a reply from being one valid call (no call, several, an unclosed
tag with more after it, invalid JSON, an unknown tool, missing / extra / mistyped arguments)
raises `FormatError` with a message that says what to fix. The trainer
sees the reply's tokens as generated either way.
"""

from __future__ import annotations

import json
import re
from functools import cache
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from swefleet.agents.prompts import PROMPTS_DIR, strip_thinking
from swefleet.agents.protocol import Action, FormatError

TOOLS_FILE = PROMPTS_DIR / "tools" / "tools.json"
_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
_OPEN = "<tool_call>"
#: What small models write instead of `</tool_call>` after a whole call: one closing tag of
#: any name, in angle or square brackets (`[/tool_call]`, `</tool_response>`, `[/code]`).
_MISSPELT_CLOSE = re.compile(r"\s*(?:\[/\w+\]|</\w+>?|<\\/\w+>)\s*")
#: Control characters (a raw newline in a multi-line command) are allowed inside strings.
_DECODER = json.JSONDecoder(strict=False)
_LINE_OBJECT = re.compile(r"^[ \t]*\{", re.MULTILINE)
_MAX_BARE = 32


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class BashArgs(_Arguments):
    command: str = Field(min_length=1)


class ViewArgs(_Arguments):
    path: str = Field(min_length=1)
    view_range: list[int] | None = Field(default=None, min_length=2, max_length=2)


class StrReplaceArgs(_Arguments):
    path: str = Field(min_length=1)
    old_str: str
    new_str: str


class TraceArgs(_Arguments):
    script: str = Field(min_length=1)
    tests: str | None = None


class SubmitArgs(_Arguments):
    """`submit` takes none; what a model passes anyway (`{"message": "done"}`) is ignored:
    the call cannot mean anything but submitting."""

    model_config = ConfigDict(extra="ignore", strict=True)


#: Argument model of every tool; must agree with `tools.json` (checked by the unit tests).
ARGUMENTS: dict[str, type[_Arguments]] = {
    "bash": BashArgs,
    "view": ViewArgs,
    "str_replace": StrReplaceArgs,
    "trace": TraceArgs,
    "submit": SubmitArgs,
}


@cache
def tool_schemas() -> tuple[dict[str, Any], ...]:
    """The OpenAI tool schemas shown to the model (from `tools.json`)."""
    return tuple(json.loads(TOOLS_FILE.read_text(encoding="utf-8")))


def parse_tool_call(text: str) -> Action:
    """The one tool call in `text` as a validated `Action`; `FormatError` otherwise."""
    body = _one_call(strip_thinking(text))
    try:
        call = _DECODER.decode(body)
    except json.JSONDecodeError as exc:
        raise FormatError(
            f"the tool call is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise FormatError("the tool call is nested too deeply to be a tool call") from None
    return tool_action(call)


def tool_action(call: object) -> Action:
    """A decoded call `{"name": ..., "arguments": {...}}` as a validated `Action`;
    `FormatError` when it is not one call of a known tool with valid arguments."""
    name, raw = _name_and_arguments(call)
    try:
        arguments = ARGUMENTS[name].model_validate(raw).model_dump(exclude_none=True)
    except ValidationError as exc:
        raise FormatError(f"bad arguments for {name}: {_errors(exc)}") from None
    if name == "bash" and not arguments["command"].strip():
        raise FormatError("bad arguments for bash: command is empty")
    if "\0" in arguments.get("path", "") + arguments.get("script", ""):  # no file has one; the sandbox would fail, not the model
        raise FormatError(f"bad arguments for {name}: path contains a NUL character")
    return Action(
        tool=name,
        arguments=arguments,
        command=arguments["command"] if name == "bash" else "",
        submit=name == "submit",
    )


def _one_call(text: str) -> str:
    calls = _CALL.findall(text)
    opened = text.count(_OPEN)
    if max(opened, len(calls)) > 1:
        raise FormatError(f"found {max(opened, len(calls))} tool calls; exactly one is allowed")
    if calls:
        return calls[0].strip()
    if opened:
        body = _whole_object(text.split(_OPEN, 1)[1])
        if body is None:
            raise FormatError("a <tool_call> was opened but not closed with </tool_call>")
        return body
    bare = _bare_calls(text)
    if len(bare) > 1:
        raise FormatError(f"found {len(bare)} tool calls; exactly one is allowed")
    if not bare:
        raise FormatError("no <tool_call> found")
    return bare[0]


def _whole_object(text: str) -> str | None:
    """The JSON object `text` holds, when it holds exactly one and nothing after it but a
    misspelt closing tag; else None."""
    body = text.strip()
    try:
        obj, end = _DECODER.raw_decode(body)
    except (json.JSONDecodeError, RecursionError):
        return None
    rest = body[end:]
    if not isinstance(obj, dict) or (rest and not _MISSPELT_CLOSE.fullmatch(rest)):
        return None
    return body[:end]


def _bare_calls(text: str) -> list[str]:
    """JSON objects with a string "name" that start a line of `text` (at most `_MAX_BARE` line
    starts are tried, so a hostile reply costs little)."""
    found: list[str] = []
    found_end = 0
    for match in list(_LINE_OBJECT.finditer(text))[:_MAX_BARE]:
        start = match.end() - 1
        if start < found_end:  # inside the object found last
            continue
        try:
            obj, end = _DECODER.raw_decode(text, start)
        except (json.JSONDecodeError, RecursionError):
            continue
        if isinstance(obj, dict) and isinstance(obj.get("name"), str):
            found.append(text[start:end])
            found_end = end
    return found


def _name_and_arguments(call: object) -> tuple[str, dict[str, Any]]:
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        raise FormatError('the tool call must be a JSON object with a string "name"')
    extra = sorted(set(call) - {"name", "arguments"})
    if extra:
        raise FormatError(f'unexpected keys {extra} in the tool call; use "name" and "arguments"')
    name = call["name"]
    if name not in ARGUMENTS:
        raise FormatError(f"unknown tool {name!r}; the tools are {', '.join(ARGUMENTS)}")
    arguments = call.get("arguments", {})
    if not isinstance(arguments, dict):
        raise FormatError('"arguments" must be a JSON object')
    return name, arguments


def _errors(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "arguments"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)
