"""Routed experts through the agent loop: a scripted MoE server returns the whole request's
array every turn; the loop stores each turn trimmed to the rows it adds (total rows linear in
the context, across a compaction split too), the samples' routing equals the one from the full
arrays, and a wrong-length array ends the episode infra_error with the trajectory kept."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from swefleet.agents.config import AgentConfig
from swefleet.agents.loop import run_episode
from swefleet.agents.scaffolds import SUBMIT_SENTINEL
from swefleet.agents.scripted import ScriptedModel
from swefleet.orchestrator.advantages import trajectory_samples

from swefleet import routed_experts
from swefleet.types import EpisodeStatus, Task, Trajectory

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ holds shared helpers
from local_sandbox import LocalShellSandbox

pytestmark = pytest.mark.unit

TASK = Task(instance_id="demo__demo-1", repo="demo/demo", problem_statement="greet() is rude.")
FILES = {"greet.py": "def greet():\n    return 'go away, rude'\n"}
SUBMIT = f"```bash\necho {SUBMIT_SENTINEL}\n```"
L, K = 4, 2


def bash(command: str) -> str:
    return f"```bash\n{command}\n```"


class MoEModel(ScriptedModel):
    """Scripted replies plus `routed_experts` for the whole request, like vLLM: row p is
    [request index, p % 256] in every layer. Request `bad` gets one row too few."""

    def __init__(self, tokenizer, script, bad: int | None = None) -> None:
        super().__init__(tokenizer, script)
        self.bad = bad
        self.full: list[str] = []

    async def generate(self, prompt_ids, **kw):
        completion = await super().generate(prompt_ids, **kw)
        index = len(self.full)
        rows = len(prompt_ids) + len(completion.completion_ids) - 1 - (index == self.bad)
        ids = np.zeros((rows, L, K), dtype=np.uint8)
        ids[:, :, 0] = index
        ids[:, :, 1] = (np.arange(rows) % 256)[:, None]
        self.full.append(routed_experts.encode(ids))
        return completion.model_copy(update={"routed_experts": self.full[-1]})


async def play(tok, tmp_path, script, bad=None, **config) -> tuple[Trajectory, MoEModel]:
    sandbox = LocalShellSandbox.create(tmp_path / "repo", FILES)
    model = MoEModel(tok, script, bad)
    cfg = AgentConfig(**{"command_timeout_s": 10.0, **config})
    return await run_episode(TASK, sandbox, model, tok, cfg, "ep", "g"), model


def sample_lengths(traj: Trajectory) -> list[int]:
    lengths: list[int] = []
    for turn in traj.turns:
        if turn.new_sample or not lengths:
            lengths.append(0)
        lengths[-1] += len(turn.prompt_ids) + len(turn.completion_ids)
    return lengths


def assert_same_routing_as_full(traj: Trajectory, model: MoEModel) -> None:
    full = traj.model_copy(deep=True)
    for turn, text in zip(full.turns, model.full, strict=True):
        turn.routed_experts, turn.routed_experts_start = text, 0
    traj.reward = full.reward = 1.0
    got, want = trajectory_samples(traj, 1.0), trajectory_samples(full, 1.0)
    assert len(got) == len(want) == len(sample_lengths(traj))
    for a, b in zip(got, want, strict=True):
        assert np.array_equal(a["routed_experts"], b["routed_experts"])
        assert a["routed_experts"].shape == (len(a["tokens"]), L, K)


async def test_ten_turns_store_rows_linear_in_the_context(tok, tmp_path):
    traj, model = await play(tok, tmp_path, [bash(f"seq {i} 30") for i in range(9)] + [SUBMIT])
    assert traj.status == EpisodeStatus.unresolved, traj.reason
    assert len(traj.turns) == 10 and not any(t.new_sample for t in traj.turns)
    rows = [len(routed_experts.decode(t.routed_experts)) for t in traj.turns]
    (n_tokens,) = sample_lengths(traj)
    assert sum(rows) == n_tokens - 1  # each position stored once
    full_rows = [len(routed_experts.decode(text)) for text in model.full]
    assert sum(full_rows) > 4 * sum(rows)  # what storing the server's arrays cost
    context = 0
    for turn, text in zip(traj.turns, model.full, strict=True):
        assert turn.routed_experts_start == max(context - 1, 0)
        kept = routed_experts.decode(turn.routed_experts)
        assert np.array_equal(kept, routed_experts.decode(text)[turn.routed_experts_start :])
        context += len(turn.prompt_ids) + len(turn.completion_ids)
    assert_same_routing_as_full(traj, model)


async def test_a_compaction_split_starts_the_new_sample_at_row_0(tok, tmp_path):
    script = [bash(f"seq {i} 400") for i in range(1, 9)] + [SUBMIT]
    probe = AgentConfig(command_timeout_s=10.0)
    sandbox = LocalShellSandbox.create(tmp_path / "probe", FILES)
    first = (await run_episode(TASK, sandbox, MoEModel(tok, [SUBMIT]), tok, probe, "p", "g")).turns
    config = {
        "max_tokens_per_turn": 48, "observation_max_chars": 400, "on_context_full": "compact",
        "compact_keep_steps": 2, "compact_observation_chars": 200, "max_steps": 12,
        "context_budget_tokens": len(first[0].prompt_ids) + 700,
    }  # fmt: skip
    traj, model = await play(tok, tmp_path, script, **config)
    assert traj.status == EpisodeStatus.unresolved, traj.reason
    lengths = sample_lengths(traj)
    assert len(lengths) >= 2
    for turn in traj.turns:
        assert (turn.routed_experts_start == 0) == (turn.new_sample or turn is traj.turns[0])
    rows = sum(len(routed_experts.decode(t.routed_experts)) for t in traj.turns)
    assert rows == sum(n - 1 for n in lengths)
    assert_same_routing_as_full(traj, model)


async def test_wrong_length_array_ends_infra_error_and_keeps_the_trajectory(tok, tmp_path):
    traj, model = await play(tok, tmp_path, [bash("ls"), bash("ls"), bash("ls")], bad=2)
    assert traj.status == EpisodeStatus.infra_error
    assert traj.reason.startswith("ValueError: server returned routed_experts with ")
    assert "want prompt + completion - 1" in traj.reason
    assert len(model.requests) == 3 and len(traj.turns) == 2  # the earlier turns are kept
    assert traj.turns[1].routed_experts_start > 0
