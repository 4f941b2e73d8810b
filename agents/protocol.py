"""The agents room's seams: a scaffold (prompts, action parsing, observations) and the small
tokenizer surface the token-exact loop needs.

A scaffold is pure text in, text out: it never touches tokens, sandboxes or models. The loop
(`agents.loop`) owns tokens, limits and the sandbox; the chat format (`agents.chat`) owns how
text becomes token deltas.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel

from envs.protocol import CommandResult
from swefleet.types import Task


class FormatError(Exception):
    """The model's reply holds no usable action (no action, several actions, bad bytes).
    The loop turns it into a format-error observation, never a crash."""


class Action(BaseModel):
    """One parsed action."""

    command: str = ""
    """Shell command to run in the sandbox (empty for a pure submit)."""
    submit: bool = False
    """True when the action itself submits (e.g. a `submit` tool call); no command is run."""


class Observation(BaseModel):
    """What the agent is shown after an action."""

    text: str
    """Text appended to the context as the next user message."""
    truncated_chars: int = 0
    """Characters of command output elided from `text`."""
    submitted: bool = False
    """True when the command's result means the agent submitted (ends the episode)."""


class Scaffold(Protocol):
    """How the agent talks: prompts, action parsing, observation rendering."""

    def system_prompt(self, task: Task) -> str: ...

    def instance_prompt(self, task: Task) -> str: ...

    def parse_action(self, text: str, finish_reason: str) -> Action:
        """Parse the decoded reply (end token removed); raise `FormatError` when malformed."""
        ...

    def observe(self, action: Action, result: CommandResult) -> Observation: ...

    def format_error(self, error: FormatError, finish_reason: str) -> str:
        """Text of the observation shown after a malformed reply."""
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
