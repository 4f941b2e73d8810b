"""Configuration of one agent episode (limits, budgets, scaffold choice)."""

from __future__ import annotations

import logging
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

log = logging.getLogger(__name__)


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
    """Context of one training sample (prompt + completions + observations) in tokens, the
    model's window. Each request asks for at most the remaining room; `on_context_full` says
    what happens when it runs out."""
    max_format_errors: int = Field(default=3, ge=1)
    """Consecutive malformed replies (no action, several actions, undecodable bytes, invalid
    tool calls) allowed; the one that reaches this count ends the episode with `format_errors`."""
    repeat_note_after: int | None = Field(default=3, ge=2)
    """When the agent's action gives the same result for the Nth time in the episode (N >= this;
    in a row or in a cycle of several actions), the observation ends with a note saying so and
    asking for a different action (a small model's commonest failure is to loop on failing
    edits). None: never."""
    attach_reproduction: bool = True
    """An issue with a reproduction section (`swefleet tasks reproduce`) comes with its script
    already saved at `/tmp/repro.py`, and its section says so (as a bug report with the
    reproducer attached). False: the agent is asked to save the script itself (a small model
    often breaks its quoting while copying it)."""
    check_reproduction_at_submit: bool = False
    """At the episode's first submit, run the issue's reproduction script (the issue's own,
    saved again; `agents/submit_check.py`) on the agent's code; when it still fails, the submit
    is refused once: the agent is shown the run and may go on working or submit again (a second
    submit is accepted whatever the script says). Tasks without a reproduction, and a script
    that passes, submit at once. The grade still comes from the hidden tests."""
    command_timeout_s: float = Field(default=60.0, gt=0)
    """Per-command timeout in the sandbox (the sandbox kills the command's process group); also
    bounds each file read/write of the file tools and the final `git diff`."""
    observation_max_chars: int = Field(default=10000, ge=200)
    """Command output (or file text shown by the `view` tool) longer than this is cut in the
    middle (head + tail kept, with a marker saying how many characters were elided)."""
    episode_timeout_s: float | None = Field(default=3600.0, gt=0)
    """Wall-clock limit of the episode (model calls + commands); None for no limit. Reaching it
    ends the episode with `limit_time`. `run_episode(deadline_s=...)` can tighten it."""
    grade_unsubmitted: bool = True
    """RL reward (`swefleet rl`): grade the patch of an episode that ended without the agent
    submitting (`limit_steps`, `format_errors`), as SWE-bench's harness grades whatever patch a
    run leaves. False: such an episode scores 0 without grading, a reward that pays only for a
    submitted fix, so a lucky patch followed by malformed turns is not reinforced. `swefleet
    eval` always grades."""
    tampered_reward: float = -1.0
    """RL reward of an episode whose grade is `tampered` (the test run contradicted itself:
    canaries, must-fail twins, exit status, JUnit report; `envs/tamper.py`). Below the 0 of an
    unresolved patch, so that a patch which guesses which of the near-identical deciding tests
    to make pass (right 1 time in 4 per deciding test) loses reward on average instead of
    gaining it."""
    scaffold: Literal["bash", "tools"] = "bash"
    """Action format: `bash` = exactly one ```bash fenced block per reply (mini-swe-agent style);
    `tools` = exactly one Qwen3-style `<tool_call>{"name": ..., "arguments": ...}</tool_call>`
    per reply, tools `bash`, `view`, `str_replace`, `trace`, `submit` (OpenAI tool schema in the
    system prompt, results as `<tool_response>` user turns)."""
    on_context_full: Literal["stop", "compact"] = "stop"
    """What happens when the context nears `context_budget_tokens`. `stop`: each request asks
    for the room left, and the episode ends with `limit_tokens` when none is left. `compact`:
    when less than `max_tokens_per_turn` is left, the next prompt is a fresh rendering (system +
    instance + a deterministic summary of up to `compact_keep_steps` latest actions/observations,
    as many as leave room for a full reply) and its turn starts a new training sample
    (`Turn.new_sample`); when even a summary of none leaves that room, it goes on as `stop`."""
    compact_keep_steps: int = Field(default=5, ge=0)
    """With `on_context_full = "compact"`: how many of the latest steps (action + observation)
    the summary keeps; earlier ones are counted, not shown."""
    compact_observation_chars: int = Field(default=2000, ge=200)
    """With `on_context_full = "compact"`: each kept observation is cut in the middle to this
    many characters in the summary."""
    min_policy_version: int | None = Field(default=None, ge=0)
    """Lowest policy version allowed to generate any turn; passed as `min_policy_version` with
    every request (the fleet routes only to servers at least that new, and a completion from
    older weights ends the episode with `dropped_stale`). None: no floor (sends 0).
    `run_episode(min_policy_version=...)` overrides it per episode."""

    @model_validator(mode="after")
    def _turn_fits_budget(self) -> AgentConfig:
        if self.max_tokens_per_turn >= self.context_budget_tokens:
            raise ValueError("max_tokens_per_turn must be smaller than context_budget_tokens")
        return self


def fit_context_budget(agent: AgentConfig, max_model_len: int | None) -> AgentConfig:
    """`agent` with `context_budget_tokens` lowered to the servers' `max_model_len` when it is
    larger (a request past the server's window is refused, and the episode would end
    `infra_error` instead of `limit_tokens` or compacting). None: unknown, unchanged. Raises
    ValueError when `max_tokens_per_turn` does not fit the window."""
    if max_model_len is None or max_model_len >= agent.context_budget_tokens:
        return agent
    if agent.max_tokens_per_turn >= max_model_len:
        raise ValueError(
            f"agent.max_tokens_per_turn={agent.max_tokens_per_turn} does not fit the servers' "
            f"max_model_len={max_model_len}: lower it (or serve a longer window)"
        )
    log.warning("agent.context_budget_tokens %d lowered to the servers' max_model_len %d",
                agent.context_budget_tokens, max_model_len)  # fmt: skip
    return agent.model_copy(update={"context_budget_tokens": max_model_len})
