"""Continue a recorded episode from turn K with a model (`swefleet replay --continue`).

The agent loop resumes with the parent's turns 0..K as its history, in a sandbox already
restored to turn K, under the same scaffold and limits: the step limit and the token budget
count the prefix, the time limit starts with the continuation.

    episode = continuation(parent, through=3, restore=restore_fn)
    traj = await episode(task, sandbox, model, tokenizer, agent, episode_id="...")

On the token path the context is the parent's own token ids (its last sample's `prompt_ids` and
`completion_ids` through turn K, then turn K+1's recorded `prompt_ids`): nothing is re-rendered
or re-tokenized, so the first request is exactly what the parent sent for turn K+1. On the chat
path (a parent recorded through a chat endpoint) the conversation is the parent's own messages.
The returned trajectory holds the parent's turns 0..K unchanged, then the new ones; its
`branch_of` and `branch_turn` name the parent and K (as RL branching's episodes do).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from swefleet.agents.chat import ChatML
from swefleet.agents.chat_loop import _ChatEpisode
from swefleet.agents.chat_record import ChatTrajectory
from swefleet.agents.config import AgentConfig
from swefleet.agents.loop import _End, _Episode, drive_episode
from swefleet.envs.protocol import Sandbox
from swefleet.inference.chat_client import ChatReply

from swefleet.types import EpisodeStatus, Task, Trajectory, Turn

Restore = Callable[[Sandbox, Any], Awaitable[float]]
"""Brings a fresh sandbox to the parent's state after turn K, given the episode's scaffold;
returns its seconds."""


def continuable_turn(parent: Trajectory, turn: int) -> None:
    """ValueError (one line) when the episode cannot go on after `turn`: it ended there with
    a submission."""
    last = len(parent.turns) - 1
    if turn == last and parent.status in (EpisodeStatus.unresolved, EpisodeStatus.resolved):
        raise ValueError(f"--turn {turn}: episode {parent.episode_id} submitted at its last turn; "
                         f"continue from an earlier one (0..{last - 1})")


def token_prefix(chat: ChatML, turns: list[Turn], through: int) -> tuple[list[int], list[int]]:
    """`(context, pending)` of the token loop after turn `through`: the recorded ids of the
    sample that holds it, and the recorded `prompt_ids` of the next turn (built from turn
    `through`'s observation only when no next turn continues that sample)."""
    start = max((i for i in range(through + 1) if turns[i].new_sample), default=0)
    context = [t for turn in turns[start : through + 1]
               for t in (*turn.prompt_ids, *turn.completion_ids)]
    nxt = turns[through + 1] if through + 1 < len(turns) else None
    if nxt is not None and not nxt.new_sample:
        return context, list(nxt.prompt_ids)
    last = turns[through]
    return context, chat.observation_delta(last.completion_ids, last.observation)


def trailing_format_errors(turns: list[Turn]) -> int:
    """Consecutive format errors at the end of `turns` (turns whose reply ran no action)."""
    n = 0
    for turn in reversed(turns):
        if turn.action:
            break
        n += 1
    return n


class _Continued(_Episode):
    """The token loop, seeded with the parent's turns 0..K."""

    def __init__(self, parent: Trajectory, through: int, restore: Restore, *args: Any) -> None:
        super().__init__(*args)
        self.parent, self.through, self.restore = parent, through, restore

    async def run(self) -> None:
        await _restore(self)
        self.system = self.scaffold.system_prompt(self.task)
        self.instance = self.scaffold.instance_prompt(self.task)
        turns = self.parent.turns
        self.traj.turns = [t.model_copy(deep=True) for t in turns[: self.through + 1]]
        self.context, self.pending = token_prefix(self.chat, turns, self.through)
        self.format_errors = trailing_format_errors(self.traj.turns)
        await _loop(self)


class _ContinuedChat(_ChatEpisode):
    """The chat loop, seeded with the parent's conversation through turn K."""

    def __init__(self, parent: ChatTrajectory, through: int, restore: Restore,
                 *args: Any) -> None:
        super().__init__(*args)
        self.parent, self.through, self.restore = parent, through, restore

    async def run(self) -> None:
        await _restore(self)
        turns = self.parent.turns[: self.through + 1]
        self.traj.turns = [t.model_copy(deep=True) for t in turns]
        self.conversation = [m for t in turns for m in (*t.messages, t.reply)]
        last = turns[-1]
        self.reply = ChatReply(content=last.reply.get("content") or "",
                               tool_calls=last.reply.get("tool_calls") or [])
        self.used_tokens = last.prompt_tokens + last.completion_tokens
        nxt = self.parent.turns[self.through + 1:self.through + 2]
        self.pending = (list(nxt[0].messages) if nxt else
                        self.scaffold.observation_messages(self.reply, last.observation))
        self.format_errors = trailing_format_errors(self.traj.turns)
        await _loop(self)


async def _restore(episode: Any) -> None:
    """Restore the sandbox (its seconds: `timings.restore`, also in `env`) and link the new
    trajectory to its parent (`branch_of`, `branch_turn`)."""
    seconds = await episode.restore(episode.sandbox, episode.scaffold)
    episode.env_s += seconds
    episode.traj.timings["restore"] = seconds
    episode.traj.branch_of, episode.traj.branch_turn = episode.parent.episode_id, episode.through


async def _loop(episode: _Episode) -> None:
    """`_Episode.run`'s loop, from the turns already there."""
    while True:
        if len(episode.traj.turns) >= episode.config.max_steps:
            raise _End(EpisodeStatus.limit_steps,
                       f"reached max_steps={episode.config.max_steps}")
        turn = await episode.generate()
        episode.traj.turns.append(turn)
        await episode.act(turn)


def continuation(parent: Trajectory, through: int, restore: Restore):
    """An episode function (the signature of `agents.loop.run_episode`, for
    `orchestrator.rollout.RolloutContext.episode`) that restores the sandbox, then continues
    `parent` after turn `through`. A chat parent continues against a chat client."""

    async def episode(task: Task, sandbox: Sandbox, model: Any, tokenizer: Any,
                      config: AgentConfig, episode_id: str, group_id: str = "",
                      deadline_s: float | None = None, *, on_end=None,
                      min_policy_version: int | None = None) -> Trajectory:
        if isinstance(parent, ChatTrajectory):
            state: _Episode = _ContinuedChat(parent, through, restore, task, sandbox, model,
                                             config, episode_id, group_id)
        else:
            state = _Continued(parent, through, restore, task, sandbox, model, tokenizer,
                               config, episode_id, group_id)
            state.min_version = min_policy_version or 0
        return await drive_episode(state, deadline_s, on_end)

    return episode


def as_recorded(record: dict) -> Trajectory:
    """A recorded episode as its own kind: a `ChatTrajectory` when it was recorded through a
    chat endpoint (`"api": "chat"`), else a token `Trajectory`."""
    if record.get("api") == "chat":
        return ChatTrajectory.model_validate(record)
    return Trajectory.model_validate(record)

