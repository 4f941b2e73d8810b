"""The multi-turn agent loop at the message level, for a model behind a chat endpoint.

The conversation is a list of messages: the system and user prompts, then each reply as the
endpoint returned it and the messages answering it (`agents.chat_scaffolds`). The endpoint
renders them with the model's own chat template; nothing is tokenized here. Limits, deadlines,
format errors, timings, patch collection and the typed statuses are the token loop's
(`agents.loop.drive_episode`): a `RequestCancelled` of the chat client ends the episode as on
the token path (`timeout` -> `model_timeout`; `overload` and `server_error` -> `infra_error`).

The context budget is judged on the endpoint's own counts: each request asks for at most
`context_budget_tokens` minus the previous answer's prompt + completion tokens (the new
observation is not counted before it is sent), and the episode ends with `limit_tokens` when
nothing is left. History compaction (`on_context_full = "compact"`) is not done here: the
budget then ends the episode as with `stop`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from swefleet.agents.chat_record import ChatTrajectory, ChatTurn
from swefleet.agents.chat_scaffolds import make_chat_scaffold
from swefleet.agents.config import AgentConfig
from swefleet.agents.loop import RepeatCounter, _End, _Episode, drive_episode
from swefleet.agents.protocol import Action
from swefleet.envs.protocol import Sandbox
from swefleet.inference.chat_client import ChatClient, ChatReply

from swefleet.types import EpisodeStatus, Task, Trajectory


async def run_chat_episode(
    task: Task,
    sandbox: Sandbox,
    model: ChatClient,
    tokenizer: object,
    config: AgentConfig,
    episode_id: str,
    group_id: str = "",
    deadline_s: float | None = None,
    *,
    on_end: Callable[[Trajectory], None] | None = None,
    min_policy_version: int | None = None,
) -> ChatTrajectory:
    """`agents.loop.run_episode` against a chat endpoint (same signature: `tokenizer` and
    `min_policy_version` are not used); returns a `ChatTrajectory`."""
    episode = _ChatEpisode(task, sandbox, model, config, episode_id, group_id)
    traj = await drive_episode(episode, deadline_s, on_end)
    assert isinstance(traj, ChatTrajectory)
    return traj


class _ChatEpisode(_Episode):
    """State of one episode against a chat endpoint: the conversation, counters, timings."""

    def __init__(
        self,
        task: Task,
        sandbox: Sandbox,
        model: ChatClient,
        config: AgentConfig,
        episode_id: str,
        group_id: str,
    ) -> None:  # the token state of `_Episode` is not needed: no super().__init__
        self.task, self.sandbox, self.model, self.config = task, sandbox, model, config
        self.scaffold = make_chat_scaffold(config)
        self.traj = ChatTrajectory(
            episode_id=episode_id, task_id=task.instance_id, group_id=group_id,
            model=model.model, endpoint=model.url,
        )  # fmt: skip
        self.conversation: list[dict[str, Any]] = []
        """Every message sent or received so far."""
        self.pending: list[dict[str, Any]] = []
        """Messages to append before the next request."""
        self.reply: ChatReply | None = None
        self.used_tokens = 0
        """Prompt + completion tokens of the last answer (the endpoint's `usage`)."""
        self.format_errors = 0
        self.repeats = RepeatCounter()
        self.deadline: float | None = None
        self.model_s = 0.0
        self.env_s = 0.0

    async def run(self) -> None:
        shown = await self.shown_task()
        self.pending = [
            {"role": "system", "content": self.scaffold.system_prompt(shown)},
            {"role": "user", "content": self.scaffold.instance_prompt(shown)},
        ]
        while True:
            if len(self.traj.turns) >= self.config.max_steps:
                raise _End(EpisodeStatus.limit_steps, f"reached max_steps={self.config.max_steps}")
            turn = await self.generate()
            self.traj.turns.append(turn)
            await self.act(turn)

    async def generate(self) -> ChatTurn:
        """One request on `conversation + pending`; the reply is appended as returned."""
        room = self.config.context_budget_tokens - self.used_tokens
        if room < 1:
            raise _End(
                EpisodeStatus.limit_tokens,
                f"conversation of {self.used_tokens} tokens leaves no room in the budget of "
                f"{self.config.context_budget_tokens}",
            )
        messages = self.conversation + self.pending
        t0 = time.monotonic()
        try:
            reply = await self.model.chat(
                messages,
                max_tokens=min(self.config.max_tokens_per_turn, room),
                tools=self.scaffold.tools,
            )
        finally:
            latency = time.monotonic() - t0
            self.model_s += latency
        self.reply = reply
        self.used_tokens = reply.prompt_tokens + reply.completion_tokens
        turn = ChatTurn(
            messages=self.pending,
            reply=reply.message(),
            finish_reason=reply.finish_reason,
            latency_s=latency,
            prompt_tokens=reply.prompt_tokens,
            completion_tokens=reply.completion_tokens,
        )
        self.conversation = [*messages, reply.message()]
        self.pending = []
        return turn

    def parse_action(self, turn: ChatTurn) -> Action:  # type: ignore[override]
        """The reply's action (its text, or its native tool call); FormatError if malformed.
        `act` (the token loop's) then carries it out and queues the answering messages."""
        assert self.reply is not None
        return self.scaffold.parse_reply(self.reply)

    def observe(self, turn: ChatTurn, text: str, truncated_chars: int = 0) -> None:  # type: ignore[override]
        assert self.reply is not None
        turn.observation = text
        turn.observation_truncated_chars = truncated_chars
        self.pending = self.scaffold.observation_messages(self.reply, text)
