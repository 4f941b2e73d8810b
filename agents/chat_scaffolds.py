"""The scaffolds at the message level, for models behind a chat endpoint (`agents.chat_loop`).

A chat scaffold wraps a text scaffold (`agents.scaffolds`): the same prompts, actions and
execution; only what a reply is and how an observation goes back differ.

- `bash`: the reply's text is parsed as on the token path (one ```bash block); observations
  and format errors go back as user messages.
- `tools`: the endpoint is offered the tool schemas (`tools`) and answers with native
  `tool_calls`; exactly one call per reply, its `function.arguments` a JSON object (invalid
  JSON, an unknown tool or bad arguments are format errors, as on the token path). Results go
  back as `tool` messages answering the call's id; format errors as a `tool` message per call
  id the reply made, else as a user message.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from swefleet.agents.config import AgentConfig
from swefleet.agents.prompts import render
from swefleet.agents.protocol import Action, FormatError, Observation
from swefleet.agents.scaffolds import BashScaffold, ToolScaffold
from swefleet.agents.scaffolds.tool_calls import ARGUMENTS, tool_action, tool_schemas
from swefleet.envs.protocol import CommandResult, Sandbox
from swefleet.inference.chat_client import ChatReply

from swefleet.types import Task

_RESPONSE_OPEN, _RESPONSE_CLOSE = "<tool_response>\n", "\n</tool_response>"


class ChatScaffold(Protocol):
    """How the agent talks to a chat endpoint: prompts, tools offered, replies, observations."""

    tools: list[dict[str, Any]] | None
    """Tool schemas sent with every request (None: none)."""

    def system_prompt(self, task: Task) -> str: ...

    def instance_prompt(self, task: Task) -> str: ...

    def parse_reply(self, reply: ChatReply) -> Action:
        """The reply's one action; `FormatError` when it holds none."""
        ...

    async def execute(self, action: Action, sandbox: Sandbox, timeout_s: float) -> Observation:
        ...

    def format_error(self, error: FormatError, finish_reason: str) -> str: ...

    def refused_submit(self, result: CommandResult) -> tuple[str, int]: ...

    def observation_messages(self, reply: ChatReply, text: str) -> list[dict[str, Any]]:
        """The messages that answer `reply` with the observation `text`."""
        ...


def make_chat_scaffold(config: AgentConfig) -> ChatScaffold:
    """The chat scaffold named by `config.scaffold`."""
    if config.scaffold == "bash":
        return ChatBash(config)
    if config.scaffold == "tools":
        return ChatTools(config)
    raise ValueError(f"unknown scaffold {config.scaffold!r}")


class ChatBash(BashScaffold):
    """Plain assistant messages holding one ```bash block."""

    tools = None

    def parse_reply(self, reply: ChatReply) -> Action:
        return self.parse_action(reply.content, reply.finish_reason)

    def observation_messages(self, reply: ChatReply, text: str) -> list[dict[str, Any]]:
        return [{"role": "user", "content": text}]


class ChatTools(ToolScaffold):
    """Native tool calls (`tools` in the request, `tool_calls` in the reply)."""

    def __init__(self, config: AgentConfig) -> None:
        super().__init__(config)
        self.tools = list(tool_schemas())

    def system_prompt(self, task: Task) -> str:
        return render(
            "chat_tools/system.j2", task=task, command_timeout_s=self.config.command_timeout_s
        )

    def parse_reply(self, reply: ChatReply) -> Action:
        return parse_native_call(reply.tool_calls)

    async def execute(self, action: Action, sandbox: Sandbox, timeout_s: float) -> Observation:
        observation = await super().execute(action, sandbox, timeout_s)
        return observation.model_copy(update={"text": _unwrap(observation.text)})

    def refused_submit(self, result: CommandResult) -> tuple[str, int]:
        text, elided = super().refused_submit(result)
        return _unwrap(text), elided

    def format_error(self, error: FormatError, finish_reason: str) -> str:
        return render(
            "chat_tools/format_error.j2",
            error=str(error),
            finish_reason=finish_reason,
            tool_names=list(ARGUMENTS),
        )

    def observation_messages(self, reply: ChatReply, text: str) -> list[dict[str, Any]]:
        ids = [call.get("id", "") for call in reply.tool_calls if isinstance(call, dict)]
        if not ids:
            return [{"role": "user", "content": text}]
        return [{"role": "tool", "tool_call_id": i, "content": text} for i in ids]


def parse_native_call(tool_calls: list[dict[str, Any]]) -> Action:
    """The one native tool call of a reply as a validated `Action`; `FormatError` otherwise."""
    if not tool_calls:
        raise FormatError("the reply makes no tool call")
    if len(tool_calls) > 1:
        raise FormatError(f"the reply makes {len(tool_calls)} tool calls; exactly one is allowed")
    function = tool_calls[0].get("function") if isinstance(tool_calls[0], dict) else None
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        raise FormatError("the tool call names no function")
    raw = function.get("arguments") or "{}"
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise FormatError(
                f"the arguments of {function['name']} are not valid JSON: {exc.msg} "
                f"(line {exc.lineno}, column {exc.colno})"
            ) from None
        except RecursionError:
            raise FormatError("the tool call is nested too deeply to be a tool call") from None
    return tool_action({"name": function["name"], "arguments": raw})


def _unwrap(text: str) -> str:
    """A tool result without the `<tool_response>` wrapper the text scaffold adds (the
    endpoint's chat template renders `tool` messages itself)."""
    if text.startswith(_RESPONSE_OPEN) and text.endswith(_RESPONSE_CLOSE):
        return text[len(_RESPONSE_OPEN) : -len(_RESPONSE_CLOSE)]
    return text
