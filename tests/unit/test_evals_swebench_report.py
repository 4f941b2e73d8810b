"""swefleet's SWE-bench run report equals swebench's own `make_run_report` on the same
predictions and per-instance logs, field by field, for every outcome an eval episode can have."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from swefleet.evals.harness_logs import instance_log_dir, write_instance_logs
from swefleet.evals.swebench_report import (
    PREDICTIONS,
    dataset_ids,
    run_report_path,
    write_swebench_outputs,
)

from swefleet.types import EpisodeStatus, GradeResult, Trajectory

pytestmark = pytest.mark.unit

RUN_ID, MODEL = "run-1", "org/ckpt-v2"  # a `/` in the name: `org__ckpt-v2` in the paths
OK = {"success": ["t::ok"], "failure": []}
QUICKSTART = Path(__file__).resolve().parents[2] / "envs" / "data" / "quickstart" / "tasks.jsonl"


def _grade(iid: str, status: str, cause: str, reason: str = "", log: str = "tests ran") -> dict:
    return GradeResult(instance_id=iid, status=status, cause=cause, reason=reason, log=log,
                       fail_to_pass=OK, pass_to_pass=OK, duration_s=300.0).model_dump()


# (instance, episode status, patch, grade): one instance per outcome an eval records
EPISODES = [
    ("resolved-1", "resolved", "diff r", _grade("resolved-1", "resolved", "tests")),
    ("unresolved-1", "unresolved", "diff u", _grade("unresolved-1", "unresolved", "tests",
                                                    "1/1 FAIL_TO_PASS failed")),
    ("empty-graded", "unresolved", "", _grade("empty-graded", "unresolved", "tests")),  # --agent empty
    ("empty-ungraded", "format_errors", "", None),
    ("ungraded-patch", "limit_steps", "diff g", None),  # a patch never graded (agent limits)
    ("patch-failed", "unresolved", "diff p", _grade("patch-failed", "error", "patch_failed",
                                                    "patch did not apply")),
    ("timed-out", "unresolved", "diff t", _grade("timed-out", "error", "timeout",
                                                 "tests timed out")),
    ("no-suite", "unresolved", "diff n", _grade("no-suite", "error", "no_suite",
                                                "suite did not run", "collected 0 items")),
    ("tampered-1", "unresolved", "diff x", _grade("tampered-1", "tampered", "tampered",
                                                  "tampered: canary")),
    ("infra-1", "infra_error", "diff i", None),  # re-run on resume: no report.json
    ("oom-1", "unresolved", "diff o", _grade("oom-1", "unresolved", "tests", "", "Killed")),
]
NOT_PREDICTED = ["not-run-1", "not-run-2"]  # in the dataset, no prediction: incomplete


def _write_eval(out: Path) -> dict:
    """The layout `swefleet eval` leaves: per-instance logs of each episode, then the
    predictions and run report; returns swefleet's report."""
    records = []
    for iid, status, patch, grade in EPISODES:
        traj = Trajectory(episode_id=f"e-{iid}", task_id=iid, status=EpisodeStatus(status),
                          model_patch=patch,
                          grade=GradeResult.model_validate(grade) if grade else None)
        write_instance_logs(instance_log_dir(out, RUN_ID, MODEL, iid), traj, 0, 1.0)
        records.append({"task_id": iid, "attempt": 0, "model_patch": patch, "grade": grade})
    records.append({"task_id": "resolved-1", "attempt": 1, "model_patch": "other", "grade": None})
    dataset = sorted([iid for iid, *_ in EPISODES] + NOT_PREDICTED)
    return write_swebench_outputs(records, out, RUN_ID, MODEL, dataset)


def _make_run_report(out: Path, monkeypatch) -> Path:
    """swebench's own report over the same files, run from the output dir as its harness is."""
    from swebench.harness.reporting import make_run_report

    predictions = [json.loads(line) for line in (out / PREDICTIONS).read_text().splitlines()]
    dataset = [{"instance_id": i} for i in sorted([iid for iid, *_ in EPISODES] + NOT_PREDICTED)]
    monkeypatch.chdir(out)
    return make_run_report({p["instance_id"]: p for p in predictions}, dataset, RUN_ID,
                           report_dir=str(out / "harness"))


def test_run_report_equals_swebench_make_run_report(tmp_path, monkeypatch):
    out = tmp_path / "eval"
    ours = _write_eval(out)
    theirs_path = _make_run_report(out, monkeypatch)
    theirs = json.loads(theirs_path.read_text())
    assert theirs_path.name == run_report_path(out, MODEL, RUN_ID).name == "org__ckpt-v2.run-1.json"
    assert json.loads(run_report_path(out, MODEL, RUN_ID).read_text()) == ours
    assert list(ours) == list(theirs)
    for key in theirs:
        assert ours[key] == theirs[key], key
    # what each outcome counts as (the harness's rules, checked by hand)
    assert ours["total_instances"] == 13 and ours["submitted_instances"] == 11
    assert ours["incomplete_ids"] == NOT_PREDICTED
    assert ours["empty_patch_ids"] == ["empty-graded", "empty-ungraded"]  # and nothing else
    assert ours["resolved_ids"] == ["resolved-1"]
    assert ours["unresolved_ids"] == ["no-suite", "oom-1", "tampered-1", "ungraded-patch",
                                      "unresolved-1"]
    assert ours["error_ids"] == ["infra-1", "patch-failed", "timed-out"]
    assert ours["completed_ids"] == sorted(ours["resolved_ids"] + ours["unresolved_ids"])
    assert ours["failure_reasons"] == {"no-suite": "no_tests_collected", "oom-1": "out_of_memory",
                                       "timed-out": "tests_timed_out"}
    assert ours["infra_failure_ids"] == ["oom-1"]
    assert ours["ambiguous_failure_ids"] == ["no-suite", "timed-out"]


def test_predictions_hold_attempt_zero_in_the_harness_format(tmp_path):
    out = tmp_path / "eval"
    _write_eval(out)
    preds = [json.loads(line) for line in (out / PREDICTIONS).read_text().splitlines()]
    assert [p["instance_id"] for p in preds] == sorted(iid for iid, *_ in EPISODES)
    assert {p["model_name_or_path"] for p in preds} == {MODEL}
    assert next(p for p in preds if p["instance_id"] == "resolved-1")["model_patch"] == "diff r"


def test_dataset_is_the_split_then_the_instance_ids():
    heldout = dataset_ids(str(QUICKSTART), "heldout")
    assert len(heldout) == 3 and len(dataset_ids(str(QUICKSTART), None)) == 7
    assert dataset_ids(str(QUICKSTART), "heldout", heldout[:1]) == heldout[:1]
