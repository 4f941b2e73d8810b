"""Per-instance logs laid out as SWE-bench's harness writes them (`swebench.harness.run_evaluation`):

    <output>/logs/run_evaluation/<run_id>/<model>/<instance_id>/
        patch.diff         the model patch that was graded
        test_output.txt    the test run's output (capped, as the grader keeps it)
        report.json        {instance_id: {patch_is_None, patch_exists, patch_successfully_applied,
                            resolved, infra_failure, tests_status}}  (SWE-bench's shape)
        run_instance.log   what happened to the instance (episode, status, grading, timings)

`<model>` is `model_name_or_path` with `/` replaced by `__`, as SWE-bench does. Attempt 0 is
`<run_id>`; attempt a >= 1 of `-k` is its own run, `<run_id>.attempt<a>`. As in SWE-bench, an
instance whose grading did not finish has no `report.json`: an infrastructure error (it is
re-run when the eval is started again), a patch that did not apply, tests past their deadline
(the harness's `EvaluationError`s); its `run_instance.log` says why, a timeout in the harness's
words (`Timeout error: N seconds exceeded.`).
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

from swefleet.rundir import write_text_atomic
from swefleet.types import EpisodeStatus, GradeCause, Trajectory

RUN_EVALUATION_LOG_DIR = Path("logs/run_evaluation")
LOG_REPORT, LOG_INSTANCE, LOG_TEST_OUTPUT, LOG_PATCH = (
    "report.json", "run_instance.log", "test_output.txt", "patch.diff")
#: Grade causes after which SWE-bench's `run_instance` raises `EvaluationError` (no report).
NO_REPORT_CAUSES = frozenset({GradeCause.patch_failed, GradeCause.timeout, GradeCause.infra})


def run_dir_name(run_id: str, attempt: int) -> str:
    return run_id if attempt == 0 else f"{run_id}.attempt{attempt}"


def instance_log_dir(out: Path, run_id: str, model_name: str, instance_id: str,
                     attempt: int = 0) -> Path:
    return (out / RUN_EVALUATION_LOG_DIR / run_dir_name(run_id, attempt)
            / model_name.replace("/", "__") / instance_id)


def write_instance_logs(log_dir: Path, traj: Trajectory, attempt: int, wall_s: float) -> None:
    """Replace `log_dir` with this episode's files (a retried instance leaves nothing stale)."""
    if log_dir.exists():
        shutil.rmtree(log_dir)
    log_dir.mkdir(parents=True)
    (log_dir / LOG_PATCH).write_text(traj.model_patch, encoding="utf-8")
    if traj.grade is not None:
        (log_dir / LOG_TEST_OUTPUT).write_text(traj.grade.log, encoding="utf-8")
    report = instance_report(traj)
    if report is not None:
        write_text_atomic(log_dir / LOG_REPORT, json.dumps(report, indent=4))
    (log_dir / LOG_INSTANCE).write_text(_instance_log(traj, attempt, wall_s), encoding="utf-8")


def instance_report(traj: Trajectory) -> dict | None:
    """SWE-bench's per-instance report; None where the harness writes none: an episode that is
    run again on resume (`infra_error`, `cancelled`) and a grading that ended in an
    `EvaluationError` (patch not applied, tests timed out). An episode scored without grading
    (e.g. `limit_time`) is reported unresolved, not applied."""
    from swefleet.envs.swebench_io import swebench_instance_report

    if traj.status in (EpisodeStatus.infra_error, EpisodeStatus.cancelled):
        return None
    if traj.grade is not None and traj.grade.cause in NO_REPORT_CAUSES:
        return None
    if traj.grade is not None:
        return swebench_instance_report(traj.grade, traj.model_patch)
    return {traj.task_id: {"patch_is_None": False, "patch_exists": bool(traj.model_patch),
                           "patch_successfully_applied": False, "resolved": False,
                           "infra_failure": False}}


def _instance_log(traj: Trajectory, attempt: int, wall_s: float) -> str:
    now = time.strftime("%Y-%m-%d %H:%M:%S")
    lines = [f"episode {traj.episode_id} of {traj.task_id} (attempt {attempt})",
             f"turns: {len(traj.turns)}, tokens: {traj.n_tokens}, wall: {wall_s:.1f} s",
             f"status: {traj.status.value}" + (f" ({traj.reason})" if traj.reason else "")]
    if traj.timings:
        lines.append("timings: " + ", ".join(f"{k}={v:.2f}s" for k, v in traj.timings.items()))
    if traj.grade is not None:
        g = traj.grade
        lines.append(f"grade: {g.status.value}" + (f" ({g.reason})" if g.reason else "")
                     + f" in {g.duration_s:.1f} s")
        if g.dropped_paths:
            lines.append("dropped from the patch (protected): " + ", ".join(g.dropped_paths))
        if g.cause == GradeCause.timeout:  # the harness's words (its failure signature)
            lines.append(f"Timeout error: {round(g.duration_s)} seconds exceeded.")
    lines.append(f"Result for {traj.task_id}: resolved: {traj.status == EpisodeStatus.resolved}")
    return "".join(f"{now} - {line}\n" for line in lines)
