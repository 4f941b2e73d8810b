"""The parity report: verdicts compared across backends, or one backend's alone."""

from __future__ import annotations

import pytest
from swefleet.envs.parity import Case, ParityReport

from swefleet.types import Task

pytestmark = pytest.mark.unit


def _verdict(status: str) -> dict:
    return {"status": status, "resolved": status == "resolved", "cause": "none",
            "tampered": status == "tampered", "flagged": False, "dropped_paths": []}


def _cases() -> list[Case]:
    task = Task(instance_id="t", repo="pkg/t", problem_statement="p", patch="g")
    return [Case("gold", task, "g"), Case("empty", task, "")]


def test_both_backends_compared_case_by_case():
    report = ParityReport(_cases(), {
        "docker": [_verdict("resolved"), _verdict("unresolved")],
        "bwrap": [_verdict("resolved"), _verdict("resolved")]}, {
        "docker": ["", "tests fail"], "bwrap": ["", ""]})
    bad = report.disagreements()
    assert [(d["case"], d["fields"]) for d in bad] == [("empty", ["resolved", "status"])]
    assert report.summary()["agreements"] == 1
    assert report.table().splitlines()[2].endswith("<-- differs")


def test_one_backend_is_reported_not_compared():
    report = ParityReport(_cases(), {"bwrap": [_verdict("resolved"), _verdict("unresolved")]},
                          {"bwrap": ["", "tests fail"]})
    assert report.disagreements() == []
    assert report.summary()["agreements"] is None
    head, gold, empty = report.table().splitlines()
    assert "bwrap" in head and "docker" not in head
    assert "resolved/none" in gold and "differs" not in gold + empty
