"""Configuration of one agent episode (limits, budgets, scaffold choice)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator


class AgentConfig(BaseModel):
    """Limits and choices for `agents.loop.run_episode`. Every limit ends the episode with its
    own typed status (see `swefleet.types.EpisodeStatus`)."""

    model_config = ConfigDict(extra="forbid", use_attribute_docstrings=True)

    max_steps: int = Field(default=100, ge=1)
    """Maximum number of model calls (turns); reaching it ends the episode with `limit_steps`."""
    max_tokens_per_turn: int = Field(default=4096, ge=1)
    """Cap on generated tokens per model call (`max_tokens`); a reply cut by it has
    finish_reason `length` and its turn is closed with the end-of-turn token in the next delta."""
    context_budget_tokens: int = Field(default=131072, ge=2)
    """Total context (prompt + all completions + observations) in tokens; when no room is left
    for another completion the episode ends with `limit_tokens`. Each request asks for at most
    the remaining room."""
    max_format_errors: int = Field(default=3, ge=1)
    """Consecutive malformed replies (no action, several actions, undecodable bytes) allowed;
    the one that reaches this count ends the episode with `format_errors`."""
    command_timeout_s: float = Field(default=60.0, gt=0)
    """Per-command timeout in the sandbox (the sandbox kills the command's process group); also
    bounds the final `git diff`."""
    observation_max_chars: int = Field(default=10000, ge=200)
    """Command output longer than this is cut in the middle (head + tail kept, with a marker
    saying how many characters were elided)."""
    episode_timeout_s: float | None = Field(default=3600.0, gt=0)
    """Wall-clock limit of the episode (model calls + commands); None for no limit. Reaching it
    ends the episode with `limit_time`. `run_episode(deadline_s=...)` can tighten it."""
    scaffold: Literal["bash"] = "bash"
    """Action format: `bash` = exactly one ```bash fenced block per reply (mini-swe-agent style).
    A tool-calling scaffold will be added behind the same `agents.protocol.Scaffold` seam."""

    @model_validator(mode="after")
    def _turn_fits_budget(self) -> AgentConfig:
        if self.max_tokens_per_turn >= self.context_budget_tokens:
            raise ValueError("max_tokens_per_turn must be smaller than context_budget_tokens")
        return self
