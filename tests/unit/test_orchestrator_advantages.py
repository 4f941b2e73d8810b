import pytest
from swefleet.orchestrator.advantages import batch_samples, group_advantages, trajectory_samples

from swefleet.types import EpisodeStatus, Trajectory, Turn

pytestmark = pytest.mark.unit


def _traj(eid, status, reward, versions=(0,)):
    turns = [
        Turn(prompt_ids=[1, 2, 3], completion_ids=[4, 5], logprobs=[-0.1, -0.2], policy_version=v)
        for v in versions
    ]
    return Trajectory(episode_id=eid, task_id="t", turns=turns, status=status, reward=reward)


def test_group_baseline_excludes_masked_episodes():
    group = [
        _traj("a", EpisodeStatus.resolved, 1.0),
        _traj("b", EpisodeStatus.unresolved, 0.0),
        _traj("c", EpisodeStatus.infra_error, None),
        _traj("d", EpisodeStatus.limit_time, 0.0),  # cut off by the clock: masked, not scored 0
    ]
    adv = group_advantages(group)
    assert adv == {"a": 0.5, "b": -0.5}


def test_samples_are_token_exact_and_masked_on_prompts():
    t = _traj("a", EpisodeStatus.resolved, 1.0, versions=(3, 2))
    [s] = trajectory_samples(t, 0.5)
    assert s["tokens"] == [1, 2, 3, 4, 5, 1, 2, 3, 4, 5]
    assert s["loss_mask"] == [False] * 3 + [True] * 2 + [False] * 3 + [True] * 2
    assert s["inference_logprobs"][3:5] == [-0.1, -0.2]
    assert s["policy_version"] == 2 and s["advantage"] == 0.5


def test_new_sample_flag_splits_and_zero_variance_drop():
    t = _traj("a", EpisodeStatus.resolved, 1.0, versions=(0, 0))
    t.turns[1].new_sample = True
    assert len(trajectory_samples(t, 1.0)) == 2
    same = [_traj("a", EpisodeStatus.unresolved, 0.0), _traj("b", EpisodeStatus.unresolved, 0.0)]
    assert batch_samples([same], drop_zero_variance=True) == []
    assert len(batch_samples([same], drop_zero_variance=False)) == 2
