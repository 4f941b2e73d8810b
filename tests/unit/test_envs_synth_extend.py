"""Growing a task file: `merge_into` replaces a package's records, or with `extend` keeps them
and adds the new ones; the kept records' functions count toward the per-function bound."""

from __future__ import annotations

import json

import pytest
from swefleet.envs.synth.generate import covered_functions, existing_tasks, merge_into

from swefleet.types import Task

pytestmark = pytest.mark.unit


def _record(instance_id: str, function: str) -> dict:
    return {"instance_id": instance_id, "repo": "o/r", "problem_statement": "x", "patch": "p",
            "split": "train", "synth": {"file": "pkg/a.py", "function": function, "seed": 0}}


def _task(instance_id: str, function: str) -> Task:
    return Task.model_validate(_record(instance_id, function))


@pytest.fixture
def task_file(tmp_path):
    path = tmp_path / "tasks.jsonl"
    rows = [_record("o__pkg-1.kind__aaaa0001", "f"), _record("o__pkg-1.kind__aaaa0002", "g"),
            _record("o__other-2.kind__bbbb0001", "h")]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _ids(path) -> list[str]:
    return sorted(json.loads(line)["instance_id"] for line in path.read_text().splitlines())


def test_replace_drops_the_package_records_and_keeps_the_others(task_file):
    assert merge_into(task_file, "o__pkg-1", [_task("o__pkg-1.kind__cccc0001", "k")]) == 2
    assert _ids(task_file) == ["o__other-2.kind__bbbb0001", "o__pkg-1.kind__cccc0001"]


def test_extend_keeps_the_package_records(task_file):
    new = [_task("o__pkg-1.kind__cccc0001", "k")]
    assert merge_into(task_file, "o__pkg-1", new, extend=True) == 4
    assert "o__pkg-1.kind__aaaa0001" in _ids(task_file)


def test_kept_records_and_their_functions(task_file, tmp_path):
    kept = existing_tasks(task_file, "o__pkg-1")
    assert [r["instance_id"] for r in kept] == ["o__pkg-1.kind__aaaa0001",
                                                "o__pkg-1.kind__aaaa0002"]
    assert covered_functions(kept) == {("pkg/a.py", "f"): 1, ("pkg/a.py", "g"): 1}
    assert existing_tasks(tmp_path / "absent.jsonl", "o__pkg-1") == []
