"""Context budget policy: what to do when a sample's context nears `context_budget_tokens`.

`stop` needs nothing here (the loop ends the episode with `limit_tokens`). `compact` replaces
the context with a fresh rendering: the system prompt, then a user message holding the
instance prompt and a summary of the last `compact_keep_steps` steps (each step's recorded
action and observation, the observation cut in the middle), from the `Turn` records alone —
deterministic, no model call. Fewer steps are kept when that is needed to leave room for a full
reply. The turn generated on it starts a new training sample (`Turn.new_sample`), so no sample
ever holds a prompt that is not an exact extension.
"""

from __future__ import annotations

from dataclasses import dataclass

from swefleet.agents.chat import ChatML
from swefleet.agents.config import AgentConfig
from swefleet.agents.prompts import render, truncate_middle

from swefleet.types import Turn


@dataclass(frozen=True)
class CompactStep:
    """One step as the summary shows it."""

    number: int
    """1-based step number within the episode."""
    action: str
    """`Turn.action` (empty for a format error)."""
    observation: str
    """`Turn.observation`, cut in the middle."""


def compacted_instance(instance: str, turns: list[Turn], keep: int, max_chars: int) -> str:
    """The user message of a compacted prompt: `instance` + a summary of the last `keep` turns."""
    kept = turns[len(turns) - keep :] if keep else []
    omitted = len(turns) - len(kept)
    steps = [
        CompactStep(
            number=omitted + i + 1,
            action=turn.action,
            observation=truncate_middle(turn.observation, max_chars)[0],
        )
        for i, turn in enumerate(kept)
    ]
    return render(
        "compact/instance.j2", instance=instance, steps=steps, omitted=omitted, total=len(turns)
    )


def compacted_prompt(
    chat: ChatML, system: str, instance: str, turns: list[Turn], config: AgentConfig
) -> list[int] | None:
    """The fresh prompt keeping the most of the last `compact_keep_steps` steps that still
    leaves room for a full reply (`max_tokens_per_turn`); None when even none kept does."""
    for keep in range(min(config.compact_keep_steps, len(turns)), -1, -1):
        user = compacted_instance(instance, turns, keep, config.compact_observation_chars)
        fresh = chat.initial_prompt(system, user)
        if config.context_budget_tokens - len(fresh) >= config.max_tokens_per_turn:
            return fresh
    return None
