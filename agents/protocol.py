"""The agents room's seams: a scaffold (prompts, action parsing, acting, observations) and the
small tokenizer surface the token-exact loop needs.

A scaffold works on text: it never touches tokens or models. Parsing and rendering are pure;
`execute` is the one place a scaffold acts, on the sandbox it is handed, within the timeout it
is given. The loop (`agents.loop`) owns tokens, limits, deadlines and timings; the chat format
(`agents.chat`) owns how text becomes token deltas.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from pydantic import BaseModel, Field
from swefleet.envs.protocol import CommandResult, Sandbox

from swefleet.types import Task


class FormatError(Exception):
    """The model's reply holds no usable action (no action, several actions, bad bytes, invalid
    tool-call JSON, an unknown tool, bad arguments). The loop turns it into a format-error
    observation, never a crash."""


class Action(BaseModel):
    """One parsed action."""

    command: str = ""
    """Shell command to run in the sandbox (empty for a pure submit or a file tool)."""
    submit: bool = False
    """True when the action itself submits (e.g. a `submit` tool call); nothing is run."""
    tool: str = ""
    """Tool name for tool-calling scaffolds (`bash`, `view`, `str_replace`, `submit`); empty
    for the bash scaffold."""
    arguments: dict[str, Any] = Field(default_factory=dict)
    """Validated tool arguments (empty for the bash scaffold)."""

    def describe(self) -> str:
        """What `Turn.action` records: the shell command, else the tool call as JSON."""
        if self.command:
            return self.command
        call = {"name": self.tool, "arguments": self.arguments}
        return json.dumps(call, ensure_ascii=False, sort_keys=True)


class Observation(BaseModel):
    """What the agent is shown after an action, plus what the action did."""

    text: str
    """Text appended to the context as the next user message."""
    truncated_chars: int = 0
    """Characters of command output / file text elided from `text`."""
    submitted: bool = False
    """True when the command's result means the agent submitted (ends the episode)."""
    exit_code: int | None = None
    """Exit code of the shell command; None for file tools or a killed command."""
    timed_out: bool = False
    """True when the shell command hit its timeout and was killed."""


class Scaffold(Protocol):
    """How the agent talks and acts: prompts, action parsing, execution, observations."""

    def system_prompt(self, task: Task) -> str: ...

    def instance_prompt(self, task: Task) -> str: ...

    def parse_action(self, text: str, finish_reason: str) -> Action:
        """Parse the decoded reply (end token removed); raise `FormatError` when malformed.
        The loop has already rejected replies whose ids are not valid UTF-8, so a U+FFFD in
        `text` is a character the model wrote and is kept like any other."""
        ...

    async def execute(self, action: Action, sandbox: Sandbox, timeout_s: float) -> Observation:
        """Carry out a non-submit action; `timeout_s` bounds its shell command. Tool failures
        the model can fix (missing file, non-unique match) are observations; sandbox failures
        (`envs.protocol.InfraError`) propagate."""
        ...

    def format_error(self, error: FormatError, finish_reason: str) -> str:
        """Text of the observation shown after a malformed reply."""
        ...

    def refused_submit(self, result: CommandResult) -> tuple[str, int]:
        """Observation of a submit the check refused (`agents.submit_check`): the issue's script
        still fails with `result`; and the characters of its output elided."""
        ...


class ChatTokenizer(Protocol):
    """What the loop needs from a tokenizer (implemented by `agents.tokenizer.Tokenizer`)."""

    im_start_id: int
    im_end_id: int
    eos_id: int

    def encode(self, text: str) -> list[int]:
        """Plain text to ids; special-token text in `text` is NOT turned into special ids."""
        ...

    def decode(self, ids: list[int]) -> str:
        """Ids to text; undecodable bytes become U+FFFD (visible)."""
        ...

    def is_valid_utf8(self, ids: list[int]) -> bool:
        """Whether the bytes `ids` stand for are valid UTF-8 (a U+FFFD in `decode(ids)` is then
        one the model wrote, e.g. copied from an observation, not a decoding failure)."""
        ...
