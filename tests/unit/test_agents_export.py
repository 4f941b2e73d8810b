"""agents.export (trajectory JSON / JSONL, SWE-bench predictions) and agents.scripted."""

from __future__ import annotations

import asyncio
import json

import pytest
from swefleet.agents.export import (
    append_trajectories,
    read_trajectories,
    read_trajectory,
    write_predictions,
    write_trajectory,
)
from swefleet.agents.scripted import ScriptedModel, ScriptedReply, ScriptExhausted
from swefleet.inference.protocol import CancelReason, RequestCancelled

from swefleet.types import EpisodeStatus, Trajectory, Turn

pytestmark = pytest.mark.unit


def make_traj(i: int) -> Trajectory:
    turn = Turn(
        prompt_ids=[1, 2, 3],
        completion_ids=[4, 5],
        logprobs=[-0.1, -0.2],
        policy_version=3,
        finish_reason="stop",
        latency_s=0.5,
        action="ls",
        observation="<output>\na.py\n</output>",
    )
    return Trajectory(
        episode_id=f"ep-{i}",
        task_id=f"demo__demo-{i}",
        group_id="g",
        turns=[turn],
        status=EpisodeStatus.unresolved,
        reason="submitted",
        model_patch=f"diff --git a/x b/x\n+{i}\n",
        timings={"total": 1.0},
    )


def test_trajectory_json_roundtrip_and_atomic(tmp_path):
    path = write_trajectory(make_traj(0), tmp_path / "out" / "ep-0.json")
    assert read_trajectory(path) == make_traj(0)
    data = json.loads(path.read_text())
    assert data["turns"][0]["completion_ids"] == [4, 5] and data["status"] == "unresolved"
    assert [p.name for p in path.parent.iterdir()] == ["ep-0.json"]  # no temp files left


def test_jsonl_append_and_torn_last_line(tmp_path):
    path = tmp_path / "episodes.jsonl"
    append_trajectories([make_traj(0)], path)
    append_trajectories([make_traj(1), make_traj(2)], path)
    with open(path, "a") as f:
        f.write(make_traj(3).model_dump_json()[:40])  # a crash mid-line
    assert [t.episode_id for t in read_trajectories(path)] == ["ep-0", "ep-1", "ep-2"]


def test_swebench_predictions(tmp_path):
    path = write_predictions([make_traj(0), make_traj(1)], tmp_path / "preds.jsonl", "ckpt-7")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert rows == [
        {
            "instance_id": f"demo__demo-{i}",
            "model_name_or_path": "ckpt-7",
            "model_patch": f"diff --git a/x b/x\n+{i}\n",
        }
        for i in range(2)
    ]


async def test_scripted_model_replays_per_episode_and_records(tok):
    model = ScriptedModel(
        tok, ["hello", ScriptedReply(ids=[5, 6], finish_reason="length")], version=4, logprob=-0.25
    )
    first = await model.generate([1, 2], max_tokens=100, episode_id="a")
    assert first.completion_ids == [*tok.encode("hello"), tok.im_end_id]
    assert first.logprobs == [-0.25] * len(first.completion_ids)
    assert first.finish_reason == "stop" and first.policy_version == 4
    again = await model.generate([9], max_tokens=100, episode_id="b")  # own cursor
    assert again.completion_ids == first.completion_ids
    second = await model.generate([1, 2, 3], max_tokens=100, episode_id="a")
    assert second.completion_ids == [5, 6] and second.finish_reason == "length"
    with pytest.raises(ScriptExhausted):
        await model.generate([1], max_tokens=100, episode_id="a")
    assert [r.prompt_ids for r in model.requests] == [[1, 2], [9], [1, 2, 3], [1]]
    assert model.prompts == [[1, 2], [9], [1, 2, 3], [1]]
    assert await model.policy_version() == 4


async def test_scripted_model_cuts_at_max_tokens_and_raises(tok):
    model = ScriptedModel(
        tok,
        [
            "a long reply " * 20,
            RequestCancelled(CancelReason.stale, "old"),
            ScriptedReply(text="x", delay_s=0.05),
        ],
    )
    cut = await model.generate([1], max_tokens=5)
    assert len(cut.completion_ids) == 5 and cut.finish_reason == "length"
    assert tok.im_end_id not in cut.completion_ids
    with pytest.raises(RequestCancelled) as err:
        await model.generate([1], max_tokens=5)
    assert err.value.reason == CancelReason.stale
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.01):
            await model.generate([1], max_tokens=5)
    assert len(model.requests) == 3


def test_turn_records_from_before_the_command_fields_still_load():
    old = {
        "prompt_ids": [1], "completion_ids": [2], "logprobs": [-0.1], "policy_version": 0,
        "finish_reason": "stop", "latency_s": 0.1, "action": "ls", "observation": "x",
        "observation_truncated_chars": 0, "new_sample": False, "routed_experts": None,
    }  # fmt: skip
    turn = Turn.model_validate_json(json.dumps(old))
    assert (turn.exit_code, turn.action_s, turn.action_timed_out) == (None, 0.0, False)
    new = turn.model_copy(update={"exit_code": 2, "action_s": 0.25, "action_timed_out": True})
    assert Turn.model_validate_json(new.model_dump_json()) == new
