"""The rollout's grade check: the grade's typed cause decides, never its reason text."""

from types import SimpleNamespace

import pytest
from swefleet.agents.config import AgentConfig
from swefleet.orchestrator.rollout import _grade, _score

from swefleet.types import EpisodeStatus, GradeCause, GradeResult, GradeStatus, Task, Trajectory

pytestmark = pytest.mark.unit
TASK = Task(instance_id="t1", repo="x/x", problem_statement="p")


class _Grader:
    def __init__(self, result: GradeResult) -> None:
        self.result = result
        self.calls = 0

    async def grade(self, task, patch):
        self.calls += 1
        return self.result


@pytest.mark.parametrize(("status", "cause", "episode", "reward"), [
    (GradeStatus.error, GradeCause.infra, EpisodeStatus.infra_error, None),
    (GradeStatus.error, GradeCause.no_suite, EpisodeStatus.unresolved, 0.0),
    (GradeStatus.error, GradeCause.patch_failed, EpisodeStatus.unresolved, 0.0),
    (GradeStatus.tampered, GradeCause.tampered, EpisodeStatus.unresolved, -1.0),
    (GradeStatus.resolved, GradeCause.tests, EpisodeStatus.resolved, 1.0),
])
async def test_only_an_infra_cause_is_an_infra_error(status, cause, episode, reward):
    grade = GradeResult(instance_id="t1", status=status, cause=cause, reason="infra-ish text")
    traj = Trajectory(episode_id="e", task_id="t1", status=EpisodeStatus.unresolved,
                      model_patch="diff")
    ctx = SimpleNamespace(grader=_Grader(grade), gold_canary=None, agent=AgentConfig())
    await _grade(ctx, TASK, traj)
    assert (traj.status, traj.reward, traj.grade) == (episode, reward, grade)
    if episode != EpisodeStatus.resolved:
        assert traj.reason == "infra-ish text"


RESOLVED = GradeResult(instance_id="t1", status=GradeStatus.resolved, cause=GradeCause.tests)


@pytest.mark.parametrize(("status", "grade_unsubmitted", "graded", "episode", "reward"), [
    (EpisodeStatus.unresolved, False, 1, EpisodeStatus.resolved, 1.0),  # submitted
    (EpisodeStatus.limit_steps, True, 1, EpisodeStatus.resolved, 1.0),  # SWE-bench style
    (EpisodeStatus.format_errors, True, 1, EpisodeStatus.resolved, 1.0),
    (EpisodeStatus.limit_steps, False, 0, EpisodeStatus.limit_steps, 0.0),  # not submitted
    (EpisodeStatus.format_errors, False, 0, EpisodeStatus.format_errors, 0.0),
    (EpisodeStatus.limit_disk, True, 0, EpisodeStatus.limit_disk, 0.0),
    (EpisodeStatus.limit_time, True, 0, EpisodeStatus.limit_time, None),  # masked
])
async def test_unsubmitted_episodes_are_graded_only_when_configured(
    status, grade_unsubmitted, graded, episode, reward
):
    grader = _Grader(RESOLVED)
    ctx = SimpleNamespace(grader=grader, agent=AgentConfig(grade_unsubmitted=grade_unsubmitted),
                          gold_canary=None)
    traj = Trajectory(episode_id="e", task_id="t1", status=status, model_patch="diff")
    await _score(ctx, TASK, traj)
    assert (grader.calls, traj.status, traj.reward) == (graded, episode, reward)


async def test_a_tampered_grade_costs_the_configured_reward():
    grade = GradeResult(instance_id="t1", status=GradeStatus.tampered, cause=GradeCause.tampered)
    traj = Trajectory(episode_id="e", task_id="t1", status=EpisodeStatus.unresolved,
                      model_patch="diff")
    ctx = SimpleNamespace(grader=_Grader(grade), gold_canary=None,
                          agent=AgentConfig(tampered_reward=-0.5))
    await _grade(ctx, TASK, traj)
    assert traj.reward == -0.5

