"""FAIL_TO_PASS / PASS_TO_PASS from repeated runs: flaky and cut ids dropped, verdicts checked."""

from __future__ import annotations

import json

import pytest
from swefleet.envs.gradelog import END_TEST_OUTPUT, START_TEST_OUTPUT, VERDICT
from swefleet.envs.synth.derive import decide
from swefleet.envs.synth.probe import Baseline, judge, well_formed
from swefleet.envs.synth.validate import check, summary

from swefleet.types import GradeResult, GradeStatus, Task

pytestmark = pytest.mark.unit


def run(statuses: dict[str, str]) -> GradeResult:
    """A grading result whose log is in the grader's format (so it can be re-graded)."""
    body = "\n".join(f"{s} {t}" for t, s in statuses.items())
    rc = 0 if all(s == "PASSED" for s in statuses.values()) else 1
    verdict = json.dumps({"phase": "tests", "exit_code": rc, "timed_out": False})
    log = f"{START_TEST_OUTPUT}\n{body}\n{END_TEST_OUTPUT}\n{VERDICT}{verdict}\n"
    return GradeResult(instance_id="x", status=GradeStatus.unresolved, tests=statuses, log=log)


def task() -> Task:
    return Task(instance_id="x", repo="o/x", problem_statement="p", image="i", patch="p")


def test_lists_come_from_all_runs_and_flaky_tests_are_dropped():
    empty = [run({"t.py::a": "FAILED", "t.py::b": "PASSED", "t.py::c": "PASSED"}),
             run({"t.py::a": "FAILED", "t.py::b": "PASSED", "t.py::c": "FAILED"})]
    gold = [run({"t.py::a": "PASSED", "t.py::b": "PASSED", "t.py::c": "PASSED"})] * 2
    d = decide(task(), empty, gold)
    assert d.ok, d.reason
    assert d.task.FAIL_TO_PASS == ["t.py::a"]
    assert d.task.PASS_TO_PASS == ["t.py::b"]
    assert d.flaky == 1  # c: passed once and failed once on the buggy state


def test_a_task_needs_both_lists():
    empty = [run({"t.py::a": "FAILED"})] * 2
    gold = [run({"t.py::a": "PASSED"})] * 2
    d = decide(task(), empty, gold)
    assert not d.ok and "PASS_TO_PASS" in d.reason


def test_tests_failing_with_the_gold_patch_are_in_neither_list():
    empty = [run({"t.py::a": "FAILED", "t.py::b": "PASSED", "t.py::z": "FAILED"})] * 2
    gold = [run({"t.py::a": "PASSED", "t.py::b": "PASSED", "t.py::z": "FAILED"})] * 2
    d = decide(task(), empty, gold)
    assert d.ok and "t.py::z" not in d.task.FAIL_TO_PASS + d.task.PASS_TO_PASS


def test_ids_a_parser_would_cut_at_a_space_are_never_used():
    # SWE-bench's pytest parser splits a result line at whitespace: `test_x[a b]` reaches it
    # as `test_x[a`, so a task listing it would grade differently under SWE-bench's harness
    assert not well_formed("t.py::test_x[a") and not well_formed("t.py::test_x[a b]")
    assert not well_formed("t.py::test_x[a\tb]") and not well_formed("t.py")
    assert not well_formed("t.py::test_x[\\x1b]133;A\\x07$")  # cut, with a `]` of its own
    assert well_formed("t.py::test_x[a::b-1]") and well_formed("t.py::T::test_y")
    empty = [run({"t.py::a[1 + 2]": "FAILED", "t.py::a[3]": "FAILED", "t.py::b": "PASSED"})] * 2
    gold = [run({"t.py::a[1 + 2]": "PASSED", "t.py::a[3]": "PASSED", "t.py::b": "PASSED"})] * 2
    d = decide(task(), empty, gold)
    assert d.ok and d.task.FAIL_TO_PASS == ["t.py::a[3]"]


def test_judge_wants_broken_tests_and_an_intact_collection():
    base = Baseline(passing={"t.py::a", "t.py::b", "u.py::c"},
                    seen={"t.py::a", "t.py::b", "u.py::c"})
    broke = run({"t.py::a": "FAILED", "t.py::b": "PASSED"})
    assert judge(broke, base, ["t.py"], max_failing=5) == ["t.py::a"]
    assert judge(run({"t.py::a": "PASSED", "t.py::b": "PASSED"}), base, ["t.py"], 5) is None
    assert judge(run({"t.py::b": "PASSED"}), base, ["t.py"], 5) is None  # a vanished
    everything = run({"t.py::a": "FAILED", "t.py::b": "FAILED"})
    assert judge(everything, base, ["t.py"], max_failing=1) is None


def test_validation_wants_every_gold_run_resolved_and_every_empty_run_unresolved():
    res = GradeResult(instance_id="x", status=GradeStatus.resolved)
    unres = GradeResult(instance_id="x", status=GradeStatus.unresolved, reason="1/1 failed")
    err = GradeResult(instance_id="x", status=GradeStatus.error, reason="patch did not apply")
    assert check(task(), [res, res], [unres, unres]).ok
    assert not check(task(), [res, unres], [unres, unres]).ok
    assert not check(task(), [res, res], [unres, err]).ok
    rows = [check(task(), [res], [unres]), check(task(), [err], [unres])]
    s = summary(rows, k=1)
    assert (s["tasks"], s["valid"], len(s["invalid"])) == (2, 1, 1)


def test_the_bundled_task_sets_hold_only_ids_every_log_parser_reads_whole():
    import json
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "envs" / "data"
    for path in sorted(root.glob("*/tasks.jsonl")):
        for line in path.read_text().splitlines():
            task = json.loads(line)
            for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
                cut = [i for i in task[key] if not well_formed(i)]
                assert not cut, (path.name, task["instance_id"], key, cut[:3])


def test_ids_that_hold_the_day_they_ran_are_not_used():
    from datetime import date

    day = date(2026, 12, 4)
    assert not well_formed("t.py::test_to_string[case7-2026-12-04]", today=day)
    assert not well_formed("t.py::test_x[20261205-a]", today=day)  # the next day, another format
    assert not well_formed("t.py::test_x[2026/12/03]", today=day)
    assert well_formed("t.py::test_format[4-1985-04-12-expected23-%Y-%m-%d]", today=day)
    assert well_formed("t.py::test_to_string[case7-2026-12-04]", today=date(2026, 12, 10))
