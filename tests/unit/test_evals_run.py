"""`swefleet eval` policies: one episode's failure is recorded, never the end of the eval."""

import json

import pytest

from swefleet.app.eval import _PatchPolicy, _record
from swefleet.types import EpisodeStatus, GradeCause, GradeResult, GradeStatus, Task

pytestmark = pytest.mark.unit
TASK = Task(instance_id="t1", repo="x/x", problem_statement="p", patch="diff --git a/x b/x\n")


class _Grader:
    def __init__(self, error: Exception | None = None, result: GradeResult | None = None) -> None:
        self.error, self.result = error, result

    async def grade(self, task, patch):
        if self.error:
            raise self.error
        return self.result or GradeResult(instance_id=task.instance_id,
                                          status=GradeStatus.resolved, cause=GradeCause.tests)


async def test_a_grader_exception_is_an_infra_error_record():
    traj = await _PatchPolicy("oracle")(TASK, _Grader(RuntimeError("docker: 500 Server Error")))
    assert traj.status == EpisodeStatus.infra_error
    assert traj.reason == "RuntimeError: docker: 500 Server Error" and traj.reward is None
    record = _record(TASK, 0, traj, 1.0)
    assert record["resolved"] is None and record["model_patch"] == TASK.patch


@pytest.mark.parametrize(("cause", "status", "reward"), [
    (GradeCause.infra, EpisodeStatus.infra_error, None),
    (GradeCause.no_suite, EpisodeStatus.unresolved, 0.0),
])
async def test_only_an_infra_cause_makes_an_infra_error(cause, status, reward):
    """The grade's cause decides, not its text: a suite that did not run while printing
    `infra...` is the patch's failure, scored 0."""
    grade = GradeResult(instance_id="t1", status=GradeStatus.error, cause=cause,
                        reason="infrastructure-looking text")
    traj = await _PatchPolicy("oracle")(TASK, _Grader(result=grade))
    assert (traj.status, traj.reward, traj.reason) == (status, reward, grade.reason)


async def test_oracle_resolves():
    traj = await _PatchPolicy("oracle")(TASK, _Grader())
    assert traj.status == EpisodeStatus.resolved and traj.reward == 1.0


def test_report_eval_of_a_non_eval_directory_is_a_clear_error(tmp_path, capsys):
    from swefleet.app.cli import main
    from swefleet.rundir import append_jsonl

    append_jsonl(tmp_path / "episodes.jsonl", {"episode_id": "e", "task_id": "t1",
                                               "status": "resolved", "reward": 1.0})  # an RL run
    assert main(["report", "eval", str(tmp_path), "--no-plots"]) == 2
    err = capsys.readouterr().err
    assert "episodes.jsonl: record 1 is not an eval episode" in err and err.count("\n") == 1


def test_report_eval_keeps_what_the_episodes_do_not_tell(tmp_path):
    from swefleet.evals.report import build_report, report_markdown

    from swefleet.app.cli import main

    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"instance_id": i, "repo": "o/r", "problem_statement": "x",
                                         "patch": "p", "image": "img", "split": s}) + "\n"
                             for i, s in (("t1", "heldout"), ("t2", "heldout_instance"))))
    episodes = [{"task_id": t, "attempt": 0, "resolved": r, "tokens": 5, "wall_s": 1.0}
                for t, r in (("t1", True), ("t2", False))]
    out = tmp_path / "eval"
    out.mkdir()
    (out / "episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    from swefleet.evals.trained_tasks import unknown_overlap

    overlap = unknown_overlap(["t1", "t2"], "a chat endpoint")
    (out / "report.json").write_text(json.dumps(build_report(episodes, 1) | overlap))
    (out / "eval_run.json").write_text(json.dumps({"tasks": str(tasks), "split": None}))
    assert main(["report", "eval", str(out), "--no-plots"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["trained_overlap"]["unknown_because"] == "a chat endpoint"
    assert "a chat endpoint" in (out / "report.md").read_text()
    assert report["per_split"]["heldout"]["success_rate"] == 1.0
    assert report["per_split"]["heldout_instance"]["success_rate"] == 0.0
    assert (out / "report.md").read_text() == report_markdown(report)
    tasks.unlink()  # the task file gone: the old per-split figures are kept at the same k
    assert main(["report", "eval", str(out), "--no-plots", "-k", "1"]) == 0
    assert json.loads((out / "report.json").read_text())["per_split"] == report["per_split"]
