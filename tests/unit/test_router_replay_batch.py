"""Routed experts from turns to the batch file: per-sample assembly, packing, validation, round
trip, and the orchestrator's all-or-none rule."""

from __future__ import annotations

import json

import numpy as np
import pytest
from swefleet.orchestrator.advantages import batch_samples, trajectory_samples

from swefleet import routed_experts
from swefleet.batch import pack_samples, read_batch, validate_batch, write_batch
from swefleet.types import EpisodeStatus, Trajectory, Turn

pytestmark = pytest.mark.unit
L, K = 3, 2


def _routing(n: int, tag: int) -> np.ndarray:
    """Rows that say which turn returned them (tag) and for which position."""
    ids = np.zeros((n, L, K), dtype=np.uint8)
    ids[:, :, 0] = tag
    ids[:, :, 1] = np.arange(n)[:, None] % 50 + 100
    return ids


def _sample(n: int, routed: np.ndarray | None = None) -> dict:
    s = {
        "tokens": list(range(1, n + 1)),
        "loss_mask": [False] + [True] * (n - 1),
        "inference_logprobs": [0.0] + [-1.0] * (n - 1),
        "advantage": 0.5,
        "policy_version": 1,
    }
    if routed is not None:
        s["routed_experts"] = routed
    return s


def test_sample_routing_takes_each_position_from_the_earliest_turn():
    # turn 0: 4 prompt + 3 completion -> covers [0, 6); turn 1: +2 prompt +2 completion -> [0, 10)
    turns = [(7, _routing(6, 1)), (11, _routing(10, 2))]
    out = routed_experts.sample_routing(turns, 11)
    assert out.shape == (11, L, K)
    assert out[:6, 0, 0].tolist() == [1] * 6 and out[6:10, 0, 0].tolist() == [2] * 4
    assert out[:10, 0, 1].tolist() == [100 + p for p in range(10)]
    assert out[10, 0].tolist() == [0, 1]  # last token: padded with k distinct experts
    with pytest.raises(ValueError, match="has 5 rows, want 6"):
        routed_experts.sample_routing([(7, _routing(5, 1))], 7)
    with pytest.raises(ValueError, match="turn 1"):
        routed_experts.sample_routing([(7, _routing(6, 1)), (9, np.zeros((8, L, 4), np.uint8))], 9)


def test_trimmed_turns_give_the_routing_of_full_arrays():
    full = [(7, _routing(6, 1)), (11, _routing(10, 2)), (15, _routing(14, 3))]
    trimmed = [(7, 0, _routing(6, 1)), (11, 6, _routing(10, 2)[6:]), (15, 10, _routing(14, 3)[10:])]
    mixed = [(7, _routing(6, 1)), (11, 6, _routing(10, 2)[6:]), (15, 0, _routing(14, 3))]
    want = routed_experts.sample_routing(full, 15)
    assert np.array_equal(routed_experts.sample_routing(trimmed, 15), want)
    assert np.array_equal(routed_experts.sample_routing(mixed, 15), want)
    assert want[:, 0, 0].tolist()[:14] == [1] * 6 + [2] * 4 + [3] * 4
    with pytest.raises(ValueError, match=r"has 3 rows, want 4 \(rows \[6, 10\)"):
        routed_experts.sample_routing([(7, 0, _routing(6, 1)), (11, 6, _routing(3, 2))], 11)
    with pytest.raises(ValueError, match="start at row 8, earlier turns cover 6"):
        routed_experts.sample_routing([(7, 0, _routing(6, 1)), (11, 8, _routing(2, 2))], 11)


def test_trim_checks_the_server_array_and_keeps_the_new_rows():
    text = routed_experts.encode(_routing(9, 4))
    assert routed_experts.trim(text, 10, 0) is text  # a sample's first turn: kept as is
    kept = routed_experts.decode(routed_experts.trim(text, 10, 6))
    assert np.array_equal(kept, _routing(9, 4)[6:]) and kept.dtype == np.uint8
    with pytest.raises(ValueError, match="routed_experts with 9 rows for a request of 11 tokens"):
        routed_experts.trim(text, 11, 6)
    for garbage in ("not base64!", routed_experts.encode(np.zeros((4, 2))), "aGVsbG8="):
        with pytest.raises(ValueError, match="routed_experts"):
            routed_experts.trim(garbage, 5, 0)


def test_pack_round_trip_dtypes_and_clear_errors(tmp_path):
    a = pack_samples([_sample(4, _routing(4, 1)), _sample(3, _routing(3, 2))])
    assert a["routed_experts"].shape == (7, L, K) and a["routed_experts"].dtype == np.uint8
    path = write_batch(tmp_path / "step_000000.npz", a, {})
    back, _ = read_batch(path)
    assert np.array_equal(back["routed_experts"], a["routed_experts"])
    wide = _routing(4, 1).astype(np.int64)
    wide[0, 0, 0] = 300
    assert pack_samples([_sample(4, wide)])["routed_experts"].dtype == np.uint16

    with pytest.raises(ValueError, match="routed_experts given for 1 of 2 samples"):
        pack_samples([_sample(4, _routing(4, 1)), _sample(3)])
    with pytest.raises(ValueError, match=r"sample 0: routed_experts shape \[3, 3, 2\], want \[4"):
        pack_samples([_sample(4, _routing(3, 1))])
    with pytest.raises(ValueError, match="differ between samples"):
        pack_samples([_sample(4, _routing(4, 1)), _sample(3, np.zeros((3, L, 4), np.uint8))])
    with pytest.raises(ValueError, match="want one of"):
        validate_batch({**a, "routed_experts": a["routed_experts"].astype(np.float32)})
    with pytest.raises(ValueError, match=r"want \[T=7, layers, top_k\]"):
        validate_batch({**a, "routed_experts": a["routed_experts"][:6]})
    with pytest.raises(ValueError, match="unknown arrays"):
        validate_batch({**a, "routed_expert": a["routed_experts"]})


def _turn(prompt: list[int], completion: list[int], routed: np.ndarray | None, **kw) -> Turn:
    return Turn(
        prompt_ids=prompt,
        completion_ids=completion,
        logprobs=[-0.5] * len(completion),
        policy_version=2,
        routed_experts=None if routed is None else routed_experts.encode(routed),
        **kw,
    )


def _traj(eid: str, reward: float, turns: list[Turn]) -> Trajectory:
    return Trajectory(
        episode_id=eid,
        task_id="t",
        group_id="g",
        turns=turns,
        status=EpisodeStatus.resolved if reward else EpisodeStatus.unresolved,
        reward=reward,
    )


def test_trajectory_samples_fill_routing_and_batches_are_all_or_none():
    turns = [
        _turn([1, 2, 3], [4, 5], _routing(4, 1)),
        _turn([6], [7, 8], _routing(7, 2)),
        _turn([9, 10], [11], _routing(2, 3), new_sample=True),
    ]
    samples = trajectory_samples(_traj("a", 1.0, turns), 0.5)
    assert [len(s["tokens"]) for s in samples] == [8, 3]
    assert samples[0]["routed_experts"][:7, 0, 0].tolist() == [1] * 4 + [2] * 3
    assert samples[1]["routed_experts"][:2, 0, 0].tolist() == [3, 3]
    packed = pack_samples(samples)
    assert packed["routed_experts"].shape == (11, L, K)

    without = _traj("b", 0.0, [_turn([1, 2], [3], None)])
    group = [_traj("a", 1.0, turns), without]
    assert all("routed_experts" not in s for s in batch_samples([group], False))
    full = batch_samples([[_traj("a", 1.0, turns), _traj("c", 0.0, turns[:1])]], False)
    assert all("routed_experts" in s for s in full)


def test_expert_load_counts_sum_to_tokens_times_top_k():
    ids = np.array([[[0, 1], [2, 3]], [[1, 2], [3, 0]], [[1, 3], [2, 0]]], dtype=np.uint8)
    load = routed_experts.expert_load(ids, 4)
    assert load.tolist() == [[1, 3, 1, 1], [2, 0, 2, 2]]
    assert (load.sum(1) == 3 * 2).all()


def _episode() -> list[Turn]:
    """Two samples (a `new_sample` split after turn 2) of full server arrays: sample 1 is
    turns 0-2 (ends 5, 8, 12), sample 2 turns 3-4 (ends 3, 6)."""
    shapes = [([1, 2, 3], [4, 5]), ([6], [7, 8]), ([9, 10], [11, 12]), ([1, 2], [3]), ([4], [5, 6])]
    turns, end = [], 0
    for i, (prompt, completion) in enumerate(shapes):
        end = (0 if i == 3 else end) + len(prompt) + len(completion)
        turns.append(_turn(prompt, completion, _routing(end - 1, i + 1), new_sample=i == 3))
    return turns


def _trimmed(turns: list[Turn]) -> list[Turn]:
    """What the agent loop stores: each turn's rows past its sample's previous turn."""
    out, end = [], 0
    for turn in turns:
        covered = 0 if turn.new_sample or not out else end - 1
        end = (0 if turn.new_sample else end) + len(turn.prompt_ids) + len(turn.completion_ids)
        text = routed_experts.trim(turn.routed_experts, end, covered)
        out.append(
            turn.model_copy(update={"routed_experts": text, "routed_experts_start": covered})
        )
    return out


def test_trimmed_and_old_full_trajectories_give_identical_samples():
    full = _traj("a", 1.0, _episode())
    trimmed = _traj("a", 1.0, _trimmed(full.turns))
    assert [t.routed_experts_start for t in trimmed.turns] == [0, 4, 7, 0, 2]
    rows = [len(routed_experts.decode(t.routed_experts)) for t in trimmed.turns]
    assert rows == [4, 3, 4, 2, 3] and sum(rows) == (12 - 1) + (6 - 1)  # linear, not quadratic
    old_record = full.model_dump(mode="json")
    for turn in old_record["turns"]:
        del turn["routed_experts_start"]  # written before the field existed
    old = Trajectory.model_validate_json(json.dumps(old_record))
    for traj in (trimmed, old, Trajectory.model_validate_json(trimmed.model_dump_json())):
        got, want = trajectory_samples(traj, 0.5), trajectory_samples(full, 0.5)
        assert [len(s["tokens"]) for s in got] == [12, 6]
        for a, b in zip(got, want, strict=True):
            assert np.array_equal(a["routed_experts"], b["routed_experts"])
    sample = trajectory_samples(trimmed, 0.5)[0]["routed_experts"]
    assert sample[:11, 0, 0].tolist() == [1] * 4 + [2] * 3 + [3] * 4
