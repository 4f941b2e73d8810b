"""What a user does without `swefleet replay`: re-run an episode to turn K with its model.

The run's policy (its newest `weights/vNNNNNN/`) is served the way `swefleet eval --agent model`
serves it (`swefleet.app.servers.open_fleet`: the run's inference config) and the agent loop runs
the episode's task in a fresh sandbox for K+1 turns. So that the re-run reaches the recorded
state, each model call is a real generation on the prompt the loop built, of as many tokens as
the recorded reply, whose recorded ids are then used as the reply (`ForcedReplies`): the model's
cost is paid in full, and the actions are the episode's.

    figures = asyncio.run(rerun_to_turn(run, traj, task, turn=10, backend="docker"))
"""

from __future__ import annotations

import time
import uuid
from contextlib import AsyncExitStack
from pathlib import Path

from swefleet.inference.protocol import Completion

from swefleet.types import Task, Trajectory, Turn


class ForcedReplies:
    """A `ModelClient` that asks `fleet` for each reply and answers with the recorded one."""

    def __init__(self, fleet, turns: list[Turn]) -> None:
        self.fleet, self.turns, self.calls = fleet, turns, 0
        self.asked = self.generated = 0
        """Tokens asked for (the recorded replies' lengths) and generated (the model may stop
        earlier, at a stop token)."""

    async def policy_version(self) -> int:
        return await self.fleet.policy_version()

    async def generate(self, prompt_ids: list[int], *, max_tokens: int, episode_id: str = "",
                       min_policy_version: int = 0) -> Completion:
        turn = self.turns[self.calls]
        self.calls += 1
        done = await self.fleet.generate(prompt_ids, max_tokens=len(turn.completion_ids),
                                         episode_id=episode_id, min_policy_version=0)
        self.asked += len(turn.completion_ids)
        self.generated += len(done.completion_ids)
        return Completion(completion_ids=list(turn.completion_ids), logprobs=list(turn.logprobs),
                          finish_reason=turn.finish_reason, policy_version=done.policy_version,
                          server=done.server)


async def rerun_to_turn(run, traj: Trajectory, task: Task, turn: int, backend: str) -> dict:
    """Seconds of: starting the servers (`engine_s`), then the sandbox and K+1 turns
    (`rerun_s`); and whether the re-run's patch is the restored one's (`patch`)."""
    from swefleet.agents.loop import run_episode
    from swefleet.agents.tokenizer import Tokenizer
    from swefleet.envs.backends import make_farm

    from swefleet.app.replay_continue import newest_weights
    from swefleet.app.servers import open_fleet

    weights, _ = newest_weights(run)
    envs = run.config.envs.model_copy(update={"backend": backend})
    longest = max(len(t.completion_ids) for t in traj.turns)
    agent = run.config.agent.model_copy(update={"max_steps": turn + 1, "min_policy_version": None,
                                                "max_tokens_per_turn": longest})
    async with AsyncExitStack() as stack:
        t0 = time.monotonic()
        fleet, _ = await open_fleet(run.config, weights, Path(run.root) / "replays" / "logs" /
                                    f"rerun-{uuid.uuid4().hex[:6]}", stack)
        await fleet.max_model_len()
        engine_s = time.monotonic() - t0
        model = ForcedReplies(fleet, traj.turns)
        t1 = time.monotonic()
        async with make_farm(f"rerun-{uuid.uuid4().hex[:8]}", envs) as farm, \
                farm.acquire(task) as sb:
            again = await run_episode(task, sb, model, Tokenizer.from_dir(weights), agent,
                                      episode_id=f"rerun-{uuid.uuid4().hex[:8]}")
            rerun_s = time.monotonic() - t1  # (sandbox removal not counted, as in a restore)
    return {"engine_s": engine_s, "rerun_s": rerun_s, "rerun_turns": len(again.turns),
            "rerun_status": again.status.value, "rerun_patch": again.model_patch,
            "tokens_asked": model.asked, "tokens_generated": model.generated}
