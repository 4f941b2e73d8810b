"""Tool-calling scaffold (Qwen3 format): tools `bash`, `view`, `str_replace`, `trace`, `submit`.

The system prompt lists the OpenAI tool schemas inside `<tools>` exactly as Qwen3's chat
template renders them; the model answers with one `<tool_call>{json}</tool_call>`; the result
comes back as a user turn `<tool_response>\\n...\\n</tool_response>` (what Qwen3's template
renders for a `tool` message). `view` / `str_replace` use the sandbox's `read_file` /
`write_file` (`agents.scaffolds.files`); `trace` runs a Python script under
`agents/scaffolds/call_tree.py` (saved to the sandbox with `suspects.py`), which prints the
script's output and the tree of the repository's functions it called, and with `tests` the
suspects among them (`agents/scaffolds/suspects.py`); `submit` ends the episode, the
submission is the sandbox's `git diff`.
"""

from __future__ import annotations

import json
import shlex
from functools import cache
from pathlib import Path

from swefleet.agents.config import AgentConfig
from swefleet.agents.prompts import render, truncate_middle
from swefleet.agents.protocol import Action, FormatError, Observation
from swefleet.agents.scaffolds.bash import refused_submit_text, render_command_result
from swefleet.agents.scaffolds.files import NumberedText, ToolError, replace_once, view_file
from swefleet.agents.scaffolds.tool_calls import ARGUMENTS, parse_tool_call, tool_schemas
from swefleet.envs.protocol import CommandResult, Sandbox

from swefleet.types import Task


class ToolScaffold:
    """Implements `agents.protocol.Scaffold` with Qwen3-style tool calls."""

    def __init__(self, config: AgentConfig) -> None:
        self.config = config

    def system_prompt(self, task: Task) -> str:
        tools = [json.dumps(tool, ensure_ascii=False) for tool in tool_schemas()]
        return render(
            "tools/system.j2",
            task=task,
            tools=tools,
            command_timeout_s=self.config.command_timeout_s,
        )

    def instance_prompt(self, task: Task) -> str:
        return render("tools/instance.j2", task=task)

    def parse_action(self, text: str, finish_reason: str) -> Action:
        return parse_tool_call(text)

    async def execute(self, action: Action, sandbox: Sandbox, timeout_s: float) -> Observation:
        if action.tool in ("bash", "trace"):
            args = action.arguments
            command = action.command or trace_command(args["script"], args.get("tests"))
            result = await sandbox.run(command, timeout_s=timeout_s)
            content, elided = render_command_result(result, self.config.observation_max_chars)
            return Observation(
                text=_response(content),
                truncated_chars=elided,
                exit_code=result.exit_code,
                timed_out=result.timed_out,
            )
        try:
            content, elided = await self._file_tool(action, sandbox)
        except ToolError as error:
            content, elided = render("tools/error.j2", error=str(error)), 0
        return Observation(text=_response(content), truncated_chars=elided)

    def format_error(self, error: FormatError, finish_reason: str) -> str:
        return render(
            "tools/format_error.j2",
            error=str(error),
            finish_reason=finish_reason,
            tool_names=list(ARGUMENTS),
        )

    def refused_submit(self, result: CommandResult) -> tuple[str, int]:
        text, elided = refused_submit_text(result, self.config.observation_max_chars,
                                           "call `submit` again")
        return _response(text), elided

    async def _file_tool(self, action: Action, sandbox: Sandbox) -> tuple[str, int]:
        args, timeout = action.arguments, self.config.command_timeout_s
        if action.tool == "view":
            view = await view_file(sandbox, args["path"], args.get("view_range"), timeout)
            return self._numbered("tools/view.j2", view)
        if action.tool == "str_replace":
            edit = await replace_once(
                sandbox, args["path"], args["old_str"], args["new_str"], timeout
            )
            return self._numbered("tools/edited.j2", edit)
        raise ValueError(f"tool {action.tool!r} has no executor")  # parse_action never allows it

    def _numbered(self, template: str, view: NumberedText) -> tuple[str, int]:
        text, elided = truncate_middle(view.text, self.config.observation_max_chars)
        return render(template, view=view, text=text, elided_chars=elided), elided


@cache
def _source(name: str) -> str:
    return (Path(__file__).with_name(name)).read_text(encoding="utf-8")


def trace_command(script: str, tests: str | None = None) -> str:
    """The shell command behind the `trace` tool: `call_tree.py` and `suspects.py` saved to a
    fresh temporary folder, `script` run under the call-tree tracer (with `tests`, pytest
    arguments, the suspects ranked against those tests), the folder removed; the exit code is
    the script's."""
    delim = "SWEFLEET_TRACE_SOURCE"
    parts = ['d="$(mktemp -d)"']
    for name in ("suspects.py", "call_tree.py"):
        source = _source(name)
        assert delim not in source
        parts.append(f"cat > \"$d/{name}\" <<'{delim}'\n{source.rstrip()}\n{delim}")
    args = (f"--tests {shlex.quote(tests)} " if tests else "") + shlex.quote(script)
    parts.append(f'python3 "$d/call_tree.py" {args}; rc=$?; rm -rf "$d"; exit $rc')
    return "\n".join(parts)


def _response(content: str) -> str:
    return render("tools/response.j2", content=content)
