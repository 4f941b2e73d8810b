"""Branching from a shared prefix: the branch point chosen, the prefix masked out of the loss
and out of the staleness check, the config's rules."""

import random

import pytest
from pydantic import ValidationError
from swefleet.orchestrator.advantages import is_scored, trajectory_samples
from swefleet.orchestrator.branching import branchable_turns, choose_turn
from swefleet.orchestrator.config import BranchingConfig

from swefleet.types import EpisodeStatus, Trajectory, Turn

pytestmark = pytest.mark.unit


def _turn(prompt: list[int], out: list[int], version: int) -> Turn:
    return Turn(prompt_ids=prompt, completion_ids=out, logprobs=[-0.25] * len(out),
                policy_version=version)


def _branch(k: int | None) -> Trajectory:
    turns = [_turn([1, 2, 3], [4, 5], 0), _turn([6], [7, 8], 0), _turn([9], [10, 11, 12], 5)]
    return Trajectory(episode_id="e", task_id="t", turns=turns, status=EpisodeStatus.unresolved,
                      reward=1.0, branch_of="parent" if k is not None else "", branch_turn=k)


def test_the_prefix_is_context_only():
    (sample,) = trajectory_samples(_branch(1), advantage=0.5)
    assert sample["tokens"] == list(range(1, 13))
    assert sample["loss_mask"] == [False] * 9 + [True] * 3
    assert sample["inference_logprobs"] == [0.0] * 9 + [-0.25] * 3
    assert sample["policy_version"] == 5  # the parent's version 0 is not the branch's


def test_an_episode_that_is_no_branch_trains_on_every_completion():
    (sample,) = trajectory_samples(_branch(None), advantage=0.5)
    assert sample["loss_mask"] == [False] * 3 + [True] * 2 + [False] + [True] * 2 + [False] + [True] * 3
    assert sample["policy_version"] == 0


def test_versions_and_scoring_count_the_branch_s_own_turns_only():
    assert _branch(1).policy_versions == [5]
    assert _branch(None).policy_versions == [0, 0, 5]
    assert not is_scored(_branch(2))  # the branch generated nothing
    assert trajectory_samples(_branch(2), advantage=1.0) == []


def test_an_old_record_reads_as_no_branch():
    record = _branch(None).model_dump(mode="json")
    del record["branch_of"], record["branch_turn"]
    traj = Trajectory.model_validate(record)
    assert (traj.branch_of, traj.branch_turn, len(traj.own_turns)) == ("", None, 3)


def test_branch_points_of_an_episode():
    traj = _branch(None)
    assert branchable_turns(traj) == 2  # after turns 0 and 1: turn 2 submitted
    traj.status = EpisodeStatus.limit_steps  # the limit ended it after turn 2's action
    assert branchable_turns(traj) == 3
    assert branchable_turns(Trajectory(episode_id="e", task_id="t")) == 0


def test_choose_turn():
    rng = random.Random(0)
    assert choose_turn(1, 3, rng) == 1 and choose_turn(7, 3, rng) == 2
    assert choose_turn(0.5, 4, rng) == 2 and choose_turn(1.0, 4, rng) == 3
    assert choose_turn(0.0, 4, rng) == 0
    assert {choose_turn("random", 3, rng) for _ in range(50)} == {0, 1, 2}
    assert choose_turn(0, 0, rng) is None


@pytest.mark.parametrize("bad", [{"turn": 1.5}, {"turn": -1}, {"turn": "last"},
                                 {"recorded_run": "runs/x"}, {"source": "snapshot"}])
def test_bad_branching_settings_are_refused(bad):
    with pytest.raises(ValidationError):
        BranchingConfig(**bad)
