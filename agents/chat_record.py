"""What an episode against a chat endpoint records: messages instead of token ids.

`ChatTurn` is a `Turn` whose token fields stay empty (`prompt_ids`, `completion_ids`,
`logprobs`: `[]`; `policy_version`: 0; no `routed_experts`) and which holds the messages the
turn added and the reply instead, with the endpoint's token counts. A chat trajectory file
therefore still reads as a `Trajectory` (the chat fields are then ignored), but it cannot be
trained on. Format: docs/trajectory_format.md.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from swefleet.types import Trajectory, Turn


class ChatTurn(Turn):
    """One request to a chat endpoint and its reply."""

    prompt_ids: list[int] = Field(default_factory=list)
    """Always empty: the endpoint's chat template renders the messages."""
    completion_ids: list[int] = Field(default_factory=list)
    """Always empty: the endpoint returns text."""
    logprobs: list[float] = Field(default_factory=list)
    """Always empty."""
    policy_version: int = 0
    """Always 0: an outside endpoint has no policy version."""
    messages: list[dict[str, Any]] = Field(default_factory=list)
    """Messages added to the conversation since the previous turn's reply (the first turn: the
    system and user messages; later turns: the observation of the previous reply)."""
    reply: dict[str, Any] = Field(default_factory=dict)
    """The assistant message as the endpoint returned it (`content`, `tool_calls`)."""
    prompt_tokens: int = 0
    """`usage.prompt_tokens` of the answer: the whole conversation as the endpoint counted it."""
    completion_tokens: int = 0
    """`usage.completion_tokens` of the answer."""


class ChatTrajectory(Trajectory):
    """An episode against a chat endpoint."""

    api: Literal["chat"] = "chat"
    """Marks a chat trajectory (token trajectories have no `api` field)."""
    model: str = ""
    """The model name sent to the endpoint (empty: the endpoint's own)."""
    endpoint: str = ""
    """Base URL of the endpoint."""
    turns: list[ChatTurn] = Field(default_factory=list)  # type: ignore[assignment]

    @property
    def n_tokens(self) -> int:
        """Tokens of the final conversation, as the endpoint counted them (the last answer's
        prompt + completion tokens)."""
        if not self.turns:
            return 0
        return self.turns[-1].prompt_tokens + self.turns[-1].completion_tokens
