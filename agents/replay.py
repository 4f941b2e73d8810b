"""Replays an episode's recorded actions in a fresh sandbox, turn by turn, and checks each
replayed observation against the recorded one (`swefleet replay`, docs/replay.md).

    steps = await replay_turns(sandbox, scaffold, traj.turns, through=3, timeout_s=60)
    [s.matches for s in steps]

A turn is replayed when it ran something: a shell command (bash scaffold, `bash` tool call) or
a file tool (`view`, `str_replace`). Format errors and `submit` tool calls changed nothing in
the sandbox and are skipped. The scaffold is the episode's own (`agent.scaffold` of the run),
so the replayed observation is rendered exactly as the agent saw it.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass

from swefleet.agents.protocol import Action, Scaffold
from swefleet.envs.protocol import Sandbox

from swefleet.types import Turn


@dataclass
class ReplayedTurn:
    """One replayed turn: what was recorded, what the replay saw."""

    turn: int
    action: str
    recorded: str
    replayed: str
    recorded_exit_code: int | None
    replayed_exit_code: int | None
    seconds: float
    """Wall seconds of the replayed action."""

    @property
    def matches(self) -> bool:
        return self.recorded == self.replayed

    def record(self) -> dict:
        return {**asdict(self), "matches": self.matches}


def action_of(turn: Turn, scaffold: str) -> Action | None:
    """The action `turn` carried out, rebuilt from its record; None when it ran nothing
    (a format error, a `submit` tool call)."""
    text = turn.action
    if not text:
        return None
    if scaffold == "bash":
        return Action(command=text)
    call = _tool_call(text)
    if call is None:  # a `bash` tool call records its command
        return Action(tool="bash", command=text)
    if call["name"] == "submit":
        return None
    return Action(tool=call["name"], arguments=call["arguments"])


def _tool_call(text: str) -> dict | None:
    """`{"name", "arguments"}` when `text` is a recorded file-tool call, else None."""
    if not text.startswith("{"):
        return None
    try:
        call = json.loads(text)
    except ValueError:
        return None
    if isinstance(call, dict) and set(call) == {"name", "arguments"}:
        return call
    return None


def replayable(turns: list[Turn], scaffold: str, through: int) -> list[tuple[int, Action]]:
    """`(index, action)` of turns 0..`through` that ran something."""
    out = []
    for i, turn in enumerate(turns[: through + 1]):
        action = action_of(turn, scaffold)
        if action is not None:
            out.append((i, action))
    return out


async def replay_turns(sandbox: Sandbox, scaffold: Scaffold, turns: list[Turn], through: int,
                       scaffold_name: str, timeout_s: float) -> list[ReplayedTurn]:
    """Carry out the actions of turns 0..`through` in `sandbox`, in order, through `scaffold`
    (each with `timeout_s`, the agent's `command_timeout_s`)."""
    out = []
    for i, action in replayable(turns, scaffold_name, through):
        t0 = time.monotonic()
        obs = await scaffold.execute(action, sandbox, timeout_s)
        turn = turns[i]
        out.append(ReplayedTurn(turn=i, action=turn.action, recorded=turn.observation,
                                replayed=obs.text, recorded_exit_code=turn.exit_code,
                                replayed_exit_code=obs.exit_code,
                                seconds=time.monotonic() - t0))
    return out


def recorded_seconds(turns: list[Turn], through: int) -> float:
    """The episode's recorded time up to turn `through`: its model calls and its actions."""
    return sum(t.latency_s + t.action_s for t in turns[: through + 1])
