"""The gold-grade record: what a parity run appends, what counts for a task, what is summed."""

from __future__ import annotations

import json

import pytest
from swefleet.envs.gold_record import (
    RecordError,
    append_record,
    fewest_grades,
    read_record,
    record_lines,
    record_summary,
)
from swefleet.envs.parity import Case

from swefleet.types import Task

pytestmark = pytest.mark.unit


def _task(name: str, patch: str = "gold") -> Task:
    return Task(instance_id=name, repo=f"pkg/{name}", problem_statement="p", patch=patch)


def _verdicts(*statuses: str) -> list[dict]:
    return [{"status": s} for s in statuses]


def test_lines_count_gold_cases_only_per_task_and_backend():
    a, b = _task("a"), _task("b")
    cases = [Case("gold", a, "g"), Case("gold", a, "g"), Case("empty", a, ""),
             Case("gold", b, "g")]
    verdicts = {"docker": _verdicts("resolved", "tampered", "unresolved", "resolved"),
                "bwrap": _verdicts("resolved", "resolved", "unresolved", "unresolved")}
    lines = {line["instance_id"]: line
             for line in record_lines(cases, verdicts, "2026-12-05", "abc")}
    assert lines["a"]["docker"] == {"grades": 2, "resolved": 1, "tampered": 1}
    assert lines["a"]["bwrap"] == {"grades": 2, "resolved": 2, "tampered": 0}
    assert lines["b"]["bwrap"] == {"grades": 1, "resolved": 0, "tampered": 0}
    assert lines["a"]["commit"] == "abc" and lines["a"]["task_hash"].startswith("sha256:")


def test_runs_add_up_and_a_changed_task_starts_again(tmp_path):
    record = tmp_path / "record.jsonl"
    a, b, c = _task("a"), _task("b"), _task("c")
    run = [Case("gold", a, "g")] * 3 + [Case("gold", b, "g")] * 3
    ok = {name: _verdicts(*["resolved"] * 6) for name in ("docker", "bwrap")}
    append_record(record, record_lines(run, ok, "d", "c1"))
    append_record(record, record_lines(run, ok, "d", "c2"))
    changed_b = _task("b", patch="another gold")
    assert fewest_grades([a, changed_b, c], read_record(record)) == {"a": 6, "b": 0, "c": 0}
    summary = record_summary([a, b, c], read_record(record), wanted=6)
    assert summary["recorded"] == 2 and summary["with_6_or_more_each"] == 2
    assert summary["gold"]["docker"] == {"grades": 12, "resolved": 12, "tampered": 0}
    assert summary["not_always_resolved"] == []


def test_fewest_is_the_lesser_backend_and_failures_are_listed(tmp_path):
    record = tmp_path / "record.jsonl"
    a = _task("a")
    verdicts = {"docker": _verdicts("resolved", "resolved"), "bwrap": _verdicts("resolved", "error")}
    lines = record_lines([Case("gold", a, "g")] * 2, verdicts, "d", "c")
    lines[0]["bwrap"] = {"grades": 1, "resolved": 0, "tampered": 0}
    append_record(record, lines)
    assert fewest_grades([a], read_record(record)) == {"a": 1}
    assert record_summary([a], read_record(record), 2)["not_always_resolved"] == ["a"]


def test_a_damaged_line_is_named_not_skipped(tmp_path):
    record = tmp_path / "record.jsonl"
    good = record_lines([Case("gold", _task("a"), "g")],
                        {"docker": _verdicts("resolved"), "bwrap": _verdicts("resolved")}, "d", "c")
    record.write_text(json.dumps(good[0]) + "\n" + '{"instance_id": "b", "docker": {}}\n')
    with pytest.raises(RecordError, match=r"record.jsonl:2"):
        read_record(record)
    assert read_record(tmp_path / "missing.jsonl") == []


def test_where_the_image_comes_from_is_not_part_of_a_tasks_identity():
    """Set-up fills in `image`; a bundle's imported task file names the image and drops the
    recipe: the same task either way. What is graded (the gold patch) does count."""
    from swefleet.envs.gold_record import task_hash

    task = _task("a").model_copy(update={"recipe": "../../recipes/a.toml"})
    imported = _task("a").model_copy(update={"image": "swefleet-task:x"})
    assert task_hash(task) == task_hash(imported)
    assert task_hash(task) != task_hash(task.model_copy(update={"patch": "another gold"}))


def test_one_backend_lines_add_to_that_backend_only(tmp_path):
    """The bwrap half of a campaign graded on a machine without Docker: its lines count for
    bwrap, a task needs the Docker half too before it has N on each backend."""
    record = tmp_path / "record.jsonl"
    a = _task("a")
    run = [Case("gold", a, "g")] * 4
    append_record(record, record_lines(run, {"bwrap": _verdicts(*["resolved"] * 4)}, "d", "c"))
    lines = read_record(record)
    assert "docker" not in lines[0]
    assert fewest_grades([a], lines) == {"a": 0}
    assert fewest_grades([a], lines, backends=("bwrap",)) == {"a": 4}
    assert record_summary([a], lines, wanted=4)["with_4_or_more_each"] == 0
    append_record(record, record_lines(run, {"docker": _verdicts(*["resolved"] * 4)}, "d", "c"))
    summary = record_summary([a], read_record(record), wanted=4)
    assert summary["with_4_or_more_each"] == 1
    assert summary["gold"]["bwrap"] == {"grades": 4, "resolved": 4, "tampered": 0}


def test_a_line_with_no_backend_is_refused(tmp_path):
    record = tmp_path / "record.jsonl"
    record.write_text(json.dumps({"instance_id": "a", "task_hash": "sha256:x"}) + "\n")
    with pytest.raises(RecordError, match="record.jsonl:1"):
        read_record(record)


def test_a_failure_names_its_run_and_the_grades_after_it(tmp_path):
    """A task not always resolved: the last run with a failure (commit, date) and what the runs
    recorded after it came to, per backend (whether a grader fix held)."""
    record, a, b = tmp_path / "record.jsonl", _task("a"), _task("b")
    ok = {name: _verdicts("resolved", "resolved") for name in ("docker", "bwrap")}
    bad = {"docker": _verdicts("resolved", "resolved"), "bwrap": _verdicts("resolved", "tampered")}
    two = [Case("gold", a, "g")] * 2
    append_record(record, record_lines(two, bad, "d1", "c1"))
    append_record(record, record_lines(two, ok, "d1", "c2"))
    append_record(record, record_lines(two, bad, "d2", "c3"))
    append_record(record, record_lines([Case("gold", b, "g")] * 2, ok, "d2", "c3"))
    append_record(record, record_lines(two, ok, "d3", "c4"))
    append_record(record, record_lines(two, ok, "d3", "c5"))
    summary = record_summary([a, b], read_record(record), 2)
    assert summary["not_always_resolved"] == ["a"] and list(summary["since_last_failure"]) == ["a"]
    since = summary["since_last_failure"]["a"]
    assert since["last_failure"] == {"commit": "c3", "date": "d2"}
    assert since["after"]["bwrap"] == {"grades": 4, "resolved": 4, "tampered": 0}
    # a changed task starts anew: its old failures are not its own
    changed = _task("a", patch="another gold")
    assert record_summary([changed], read_record(record), 2)["since_last_failure"] == {}
