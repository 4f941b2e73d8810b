"""Hostile model output, server answers and cancellation through the agent loop: garbage that
only a model can produce is a format error (the model's fault, scored), never an infra error; an
answer that cannot be stored exactly ends the episode before it reaches a trajectory file; a
cancellation at any point still hands the trajectory to `on_end`."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
from swefleet.agents.config import AgentConfig
from swefleet.agents.export import append_trajectories, read_trajectories
from swefleet.agents.loop import run_episode
from swefleet.agents.scaffolds import SUBMIT_SENTINEL
from swefleet.agents.scripted import ScriptedModel

from swefleet.types import EpisodeStatus, Task, Trajectory

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ holds shared helpers
from local_sandbox import LocalShellSandbox

pytestmark = pytest.mark.unit

TASK = Task(instance_id="demo__demo-1", repo="demo/demo", problem_statement="greet() is rude.")
FILES = {"greet.py": "def greet():\n    return 'go away, rude'\n"}
SUBMIT = f"```bash\necho {SUBMIT_SENTINEL}\n```"


def call(name: str, **arguments) -> str:
    body = json.dumps({"name": name, "arguments": arguments})
    return f"<tool_call>\n{body}\n</tool_call>"


@pytest.fixture
def sandbox(tmp_path) -> LocalShellSandbox:
    return LocalShellSandbox.create(tmp_path / "repo", FILES)


async def test_degenerate_tool_calls_are_format_errors(tok, sandbox):
    script = [
        "<tool_call>" + "[" * 3000 + "</tool_call>",  # a repetition loop: nests past json's limit
        call("view", path="greet.py\0"),
        call("str_replace", path="\0", old_str="rude", new_str="nice"),
        call("view", path="greet.py"),
        call("submit"),
    ]
    model = ScriptedModel(tok, script)
    cfg = AgentConfig(scaffold="tools", command_timeout_s=10.0, max_format_errors=4)
    traj = await run_episode(TASK, sandbox, model, tok, cfg, "ep", "g")

    assert (traj.status, traj.reason) == (EpisodeStatus.unresolved, "submitted")
    nested, view_nul, edit_nul, view, _ = traj.turns
    assert "nested too deeply" in nested.observation
    assert "view: path contains a NUL character" in view_nul.observation
    assert "str_replace: path contains a NUL character" in edit_nul.observation
    for turn in (nested, view_nul, edit_nul):
        assert turn.action == "" and turn.observation.startswith("Format error")
    assert "go away, rude" in view.observation and traj.model_patch == ""


async def test_non_finite_logprobs_never_reach_a_trajectory_file(tok, sandbox, tmp_path):
    for logprob in (float("nan"), float("-inf")):
        model = ScriptedModel(tok, ["```bash\nls\n```", SUBMIT], logprob=logprob)
        traj = await run_episode(TASK, sandbox, model, tok, AgentConfig(), f"ep-{logprob}", "g")
        assert traj.status == EpisodeStatus.infra_error and "non-finite" in traj.reason
        assert traj.turns == []
        append_trajectories([traj], tmp_path / "episodes.jsonl")
    assert len(read_trajectories(tmp_path / "episodes.jsonl")) == 2


class SlowDiffSandbox(LocalShellSandbox):
    diffing = False

    async def diff(self):
        self.diffing = True
        await asyncio.sleep(30)
        return await super().diff()


async def test_cancelled_while_collecting_the_patch_still_hands_over_the_trajectory(tok, tmp_path):
    sandbox = SlowDiffSandbox.create(tmp_path / "repo", FILES)
    ended: list[Trajectory] = []
    model = ScriptedModel(tok, ["```bash\nls\n```", SUBMIT])
    task = asyncio.create_task(
        run_episode(TASK, sandbox, model, tok, AgentConfig(), "ep", "g", on_end=ended.append)
    )
    while not sandbox.diffing:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (traj,) = ended
    assert traj.status == EpisodeStatus.cancelled and "unresolved: submitted" in traj.reason
    assert len(traj.turns) == 2 and traj.model_patch == "" and traj.timings["total"] > 0
