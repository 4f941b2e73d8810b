"""The rollout's grade check: the grade's typed cause decides, never its reason text."""

from types import SimpleNamespace

import pytest
from swefleet.orchestrator.rollout import _grade

from swefleet.types import EpisodeStatus, GradeCause, GradeResult, GradeStatus, Task, Trajectory

pytestmark = pytest.mark.unit
TASK = Task(instance_id="t1", repo="x/x", problem_statement="p")


class _Grader:
    def __init__(self, result: GradeResult) -> None:
        self.result = result

    async def grade(self, task, patch):
        return self.result


@pytest.mark.parametrize(("status", "cause", "episode", "reward"), [
    (GradeStatus.error, GradeCause.infra, EpisodeStatus.infra_error, None),
    (GradeStatus.error, GradeCause.no_suite, EpisodeStatus.unresolved, 0.0),
    (GradeStatus.error, GradeCause.patch_failed, EpisodeStatus.unresolved, 0.0),
    (GradeStatus.tampered, GradeCause.tampered, EpisodeStatus.unresolved, 0.0),
    (GradeStatus.resolved, GradeCause.tests, EpisodeStatus.resolved, 1.0),
])
async def test_only_an_infra_cause_is_an_infra_error(status, cause, episode, reward):
    grade = GradeResult(instance_id="t1", status=status, cause=cause, reason="infra-ish text")
    traj = Trajectory(episode_id="e", task_id="t1", status=EpisodeStatus.unresolved,
                      model_patch="diff")
    await _grade(SimpleNamespace(grader=_Grader(grade)), TASK, traj)
    assert (traj.status, traj.reward, traj.grade) == (episode, reward, grade)
    if episode != EpisodeStatus.resolved:
        assert traj.reason == "infra-ish text"
