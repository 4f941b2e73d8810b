"""Context budget policy `compact` (agents.context + the loop): the break is placed exactly where
the linear context would leave less than a full reply, the new sample's prompt is a fresh,
deterministic rendering from the records, and every sample is token-exact on its own."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
from swefleet.agents.chat import ChatML
from swefleet.agents.config import AgentConfig
from swefleet.agents.context import compacted_instance, compacted_prompt
from swefleet.agents.loop import run_episode
from swefleet.agents.scaffolds import SUBMIT_SENTINEL, make_scaffold
from swefleet.agents.scripted import ScriptedModel
from swefleet.agents.tokenizer import Tokenizer

from swefleet.types import EpisodeStatus, Task, Trajectory, Turn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ holds shared helpers
from local_sandbox import LocalShellSandbox

pytestmark = pytest.mark.unit

TASK = Task(instance_id="demo__demo-1", repo="demo/demo", problem_statement="greet() is rude.")
FILES = {"greet.py": "def greet():\n    return 'go away, rude'\n"}
SUBMIT = f"```bash\necho {SUBMIT_SENTINEL}\n```"
REPLY = 48  # max_tokens_per_turn in these tests


def bash(command: str) -> str:
    return f"```bash\n{command}\n```"


def prompts_of(tok: Tokenizer, cfg: AgentConfig) -> tuple[str, str, list[int]]:
    scaffold = make_scaffold(cfg)
    system, instance = scaffold.system_prompt(TASK), scaffold.instance_prompt(TASK)
    return system, instance, ChatML(tok).initial_prompt(system, instance)


def config(tok: Tokenizer, extra_budget: int, **overrides) -> AgentConfig:
    base = AgentConfig(command_timeout_s=10.0)
    initial = len(prompts_of(tok, base)[2])
    values = {
        "command_timeout_s": 10.0,
        "max_tokens_per_turn": REPLY,
        "context_budget_tokens": initial + extra_budget,
        "observation_max_chars": 400,
        "on_context_full": "compact",
        "compact_keep_steps": 2,
        "compact_observation_chars": 200,
        "max_steps": 12,
        **overrides,
    }
    return AgentConfig(**values)


async def play(tok, tmp_path, script, cfg, episode_id="ep"):
    sandbox = LocalShellSandbox.create(tmp_path / episode_id, FILES)
    model = ScriptedModel(tok, script)
    traj = await run_episode(TASK, sandbox, model, tok, cfg, episode_id, "g")
    return traj, model


def assert_samples_exact(traj: Trajectory, prompts: list[list[int]]) -> list[list[int]]:
    """Within a sample each request == the sample's recorded ids so far; a `new_sample` turn's
    prompt_ids are the whole request. Returns each sample's token ids."""
    assert len(prompts) == len(traj.turns)
    samples: list[list[int]] = []
    for turn, prompt in zip(traj.turns, prompts, strict=True):
        if turn.new_sample or not samples:
            samples.append([])
        assert prompt == samples[-1] + turn.prompt_ids
        samples[-1] = prompt + turn.completion_ids
    return samples


async def test_break_is_exactly_where_a_full_reply_no_longer_fits(tok, tmp_path):
    script = [bash(f"seq {i} 400") for i in range(1, 9)] + [SUBMIT]
    cfg = config(tok, extra_budget=700)
    traj, model = await play(tok, tmp_path, script, cfg)
    assert traj.status == EpisodeStatus.unresolved, traj.reason
    samples = assert_samples_exact(traj, model.prompts)
    assert 2 <= len(samples) and not traj.turns[0].new_sample

    chat = ChatML(tok)
    system, instance, _ = prompts_of(tok, cfg)
    context = traj.turns[0].prompt_ids + traj.turns[0].completion_ids
    for i in range(1, len(traj.turns)):
        previous, turn = traj.turns[i - 1], traj.turns[i]
        linear = context + chat.observation_delta(previous.completion_ids, previous.observation)
        full = cfg.context_budget_tokens - len(linear) < REPLY
        assert turn.new_sample == full, i
        if full:  # a fresh rendering from the records alone, keeping the last 2 steps
            summary = compacted_instance(instance, traj.turns[:i], 2, 200)
            assert turn.prompt_ids == chat.initial_prompt(system, summary)
            assert f"seq {i} 400" in summary and f"seq {i - 2} 400" not in summary
            context = turn.prompt_ids + turn.completion_ids
        else:
            assert turn.prompt_ids == linear[len(context) :]
            context = linear + turn.completion_ids
    for request in model.requests:  # every request fits; a fresh one gets a full reply
        assert len(request.prompt_ids) + request.max_tokens <= cfg.context_budget_tokens
    for turn, request in zip(traj.turns, model.requests, strict=True):
        if turn.new_sample:
            assert request.max_tokens == REPLY


@pytest.mark.parametrize("margin, breaks", [(0, False), (-1, True)])
async def test_break_boundary_is_exact(tok, tmp_path, margin, breaks):
    """Budget = (linear prompt of turn k) + REPLY + margin: a full reply fits at margin 0 (no
    break at k), one token less (margin -1) compacts exactly at turn k."""
    k = 4
    script = [bash(f"seq {i} 400") for i in range(1, 9)]
    calibrate = config(tok, extra_budget=100_000, on_context_full="stop", max_steps=k + 1)
    _, linear = await play(tok, tmp_path, script, calibrate, "calibrate")
    budget = len(linear.prompts[k]) + REPLY + margin
    cfg = config(tok, extra_budget=0, context_budget_tokens=budget, max_steps=k + 1)
    traj, model = await play(tok, tmp_path, script, cfg)
    assert [t.new_sample for t in traj.turns] == [False] * k + [breaks]
    assert model.prompts[:k] == linear.prompts[:k]
    assert model.requests[k].max_tokens == REPLY
    assert_samples_exact(traj, model.prompts)


async def test_compaction_is_deterministic(tok, tmp_path):
    script = [bash(f"seq {i} 400") for i in range(1, 7)] + [SUBMIT]
    cfg = config(tok, extra_budget=700)
    (a, model_a), (b, model_b) = await asyncio.gather(
        play(tok, tmp_path, script, cfg, "ep-a"), play(tok, tmp_path, script, cfg, "ep-b")
    )
    assert any(t.new_sample for t in a.turns)
    assert model_a.prompts == model_b.prompts
    assert [t.new_sample for t in a.turns] == [t.new_sample for t in b.turns]


async def test_no_room_even_compacted_falls_back_to_limit_tokens(tok, tmp_path):
    cfg = config(tok, extra_budget=REPLY + 40)  # any history block leaves < REPLY tokens
    traj, model = await play(tok, tmp_path, [bash("seq 1 400")] * 5, cfg)
    assert traj.status == EpisodeStatus.limit_tokens
    assert not any(t.new_sample for t in traj.turns)
    assert_samples_exact(traj, model.prompts)


async def test_stop_policy_never_starts_a_new_sample(tok, tmp_path):
    cfg = config(tok, extra_budget=700, on_context_full="stop")
    traj, model = await play(tok, tmp_path, [bash("seq 1 400")] * 12, cfg)
    assert traj.status == EpisodeStatus.limit_tokens
    assert not any(t.new_sample for t in traj.turns)
    assert_samples_exact(traj, model.prompts)


def turn(action: str, observation: str) -> Turn:
    return Turn(
        prompt_ids=[], completion_ids=[], logprobs=[], policy_version=0,
        action=action, observation=observation,
    )  # fmt: skip


def test_summary_keeps_fewer_steps_when_needed_for_a_full_reply(tok):
    turns = [turn(f"step {i}", f"out{i} " * 60) for i in range(6)]
    chat = ChatML(tok)
    base = AgentConfig(compact_keep_steps=4, compact_observation_chars=1000)
    system, instance, initial = prompts_of(tok, base)
    sizes = {
        keep: len(chat.initial_prompt(system, compacted_instance(instance, turns, keep, 1000)))
        for keep in range(5)
    }
    assert sizes[0] < sizes[1] < sizes[2] < sizes[3] < sizes[4]
    for keep in range(5):  # a budget where exactly `keep` steps still leave a full reply
        budget = sizes[keep] + REPLY
        cfg = base.model_copy(
            update={"context_budget_tokens": budget, "max_tokens_per_turn": REPLY}
        )
        fresh = compacted_prompt(chat, system, instance, turns, cfg)
        summary = compacted_instance(instance, turns, keep, 1000)
        assert fresh == chat.initial_prompt(system, summary)
    too_small = base.model_copy(
        update={"context_budget_tokens": sizes[0] + REPLY - 1, "max_tokens_per_turn": REPLY}
    )
    assert compacted_prompt(chat, system, instance, turns, too_small) is None
    assert len(initial) < sizes[0]


def test_summary_text_counts_omitted_steps_and_format_errors():
    turns = [turn("ls", "a"), turn("", "Format error: x"), turn("cat f", "b" * 500)]
    text = compacted_instance("ISSUE", turns, keep=2, max_chars=200)
    assert text.startswith("ISSUE\n\n<history>") and "took 3 steps" in text
    assert "1 earlier step is not shown" in text and "<action>\nls\n</action>" not in text
    assert '<step number="2">' in text and "(no valid action: format error)" in text
    assert '<step number="3">' in text and "characters elided" in text
    assert compacted_instance("ISSUE", turns, 2, 200) == text  # deterministic
