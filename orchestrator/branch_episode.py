"""One branch of a group: an episode that starts after turn k of its parent
(`orchestrator/branching.py`) and continues with the policy to its end.

Its sandbox is a fresh one, restored by carrying out the parent's actions of turns 0..k in
order (`agents.replay.replay_turns`, inside the episode's deadline; a replayed observation that
differs from the recorded one is counted and logged, the branch goes on). Its context is the
parent's tokens of turns 0..k, copied, and the delta of turn k's observation, exactly as the
parent's agent loop appended it; from there the token loop of `agents.loop` runs unchanged:
limits, statuses, patch collection. `max_steps` counts the prefix's turns.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from swefleet.agents.config import AgentConfig
from swefleet.agents.loop import _End, _Episode, drive_episode
from swefleet.agents.protocol import ChatTokenizer
from swefleet.agents.replay import replay_turns
from swefleet.envs.protocol import Sandbox
from swefleet.inference.protocol import ModelClient

from swefleet.types import EpisodeStatus, Task, Trajectory

if TYPE_CHECKING:
    from swefleet.orchestrator.branching import BranchPoint

log = logging.getLogger(__name__)


async def continue_episode(
    point: BranchPoint,
    task: Task,
    sandbox: Sandbox,
    model: ModelClient,
    tokenizer: ChatTokenizer,
    config: AgentConfig,
    episode_id: str,
    group_id: str = "",
    deadline_s: float | None = None,
    *,
    on_end: Callable[[Trajectory], None] | None = None,
    min_policy_version: int | None = None,
) -> Trajectory:
    """`agents.loop.run_episode` from `point`: the same signature after it, the same ends."""
    episode = _BranchEpisode(point, task, sandbox, model, tokenizer, config, episode_id, group_id)
    if min_policy_version is not None:
        episode.min_version = min_policy_version
    return await drive_episode(episode, deadline_s, on_end)


class _BranchEpisode(_Episode):
    """An `_Episode` whose first turns, context and sandbox state are its parent's."""

    def __init__(self, point: BranchPoint, *args) -> None:
        super().__init__(*args)
        self.point = point
        self.traj.branch_of = point.parent.episode_id
        self.traj.branch_turn = point.turn

    async def run(self) -> None:
        shown = await self.shown_task()
        self.system = self.scaffold.system_prompt(shown)
        self.instance = self.scaffold.instance_prompt(shown)
        self.start_from_prefix()
        await self.restore()
        while True:  # `_Episode.run`'s loop, from turn k+1
            if len(self.traj.turns) >= self.config.max_steps:
                raise _End(EpisodeStatus.limit_steps, f"reached max_steps={self.config.max_steps}")
            turn = await self.generate()
            self.traj.turns.append(turn)
            await self.act(turn)

    def start_from_prefix(self) -> None:
        """Turns, context, pending observation and format-error count after turn k."""
        prefix = [t.model_copy() for t in self.point.prefix]
        if prefix[0].prompt_ids != self.chat.initial_prompt(self.system, self.instance):
            raise ValueError(f"parent {self.point.parent.episode_id} was run with other agent "
                             "settings (its first prompt differs from this run's)")
        self.traj.turns = prefix
        start = max((i for i, t in enumerate(prefix) if t.new_sample), default=0)
        self.context = [tok for t in prefix[start:] for tok in t.prompt_ids + t.completion_ids]
        last = prefix[-1]
        self.pending = self.chat.observation_delta(last.completion_ids, last.observation)
        while self.format_errors < len(prefix) and not prefix[-1 - self.format_errors].action:
            self.format_errors += 1

    async def restore(self) -> None:
        """Carry out the prefix's actions in the fresh sandbox."""
        t0 = time.monotonic()
        try:
            steps = await replay_turns(self.sandbox, self.scaffold, self.traj.turns,
                                       self.point.turn, self.config.scaffold,
                                       self.config.command_timeout_s)
        finally:
            seconds = time.monotonic() - t0
            self.env_s += seconds
            self.traj.timings["restore"] = seconds
        stats = self.point.stats
        stats.restored += 1
        differ = [s.turn for s in steps if not s.matches]
        if differ:
            stats.replay_mismatches += 1
            log.warning("branch %s of %s: replayed observations of turns %s differ from the "
                        "recorded ones", self.traj.episode_id, self.point.parent.episode_id,
                        differ)
