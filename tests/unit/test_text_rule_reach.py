"""`benchmarks/text_rule_reach.py`: the rule over the whole repository's text, against a task's
probes as recorded."""

from __future__ import annotations

import pytest
from swefleet.envs.behaviour import Probe, ProbeCall

from benchmarks.text_rule_reach import reach
from swefleet.types import Task

pytestmark = pytest.mark.unit


def _task() -> Task:
    probe = Probe(calls=[
        ProbeCall(call="pkg:to_hex", args="('red',)", kwargs="{}", gold="'#ff0000'",
                  decides=True, others=[]),
        ProbeCall(call="pkg:to_hex", args="('navy',)", kwargs="{}", gold="'#000080'",
                  decides=False, others=["'#000081'", "'#000180'", "'#010080'"])])
    return Task.model_validate({"instance_id": "pkg-1", "repo": "o/pkg",
                                "problem_statement": "to_hex gives wrong values",
                                "probes": {"tests/test_hex.py::test_navy": probe.model_dump()}})


def test_a_docstring_that_spells_out_a_gold_value_crosses_off_its_twins():
    docstring = '"""Colour names: `to_hex("navy")` gives "#000080"."""'
    assert reach(_task(), docstring) == {"changed": 1, "unusable": 1, "none_left": True}


def test_a_text_that_spells_out_the_twins_alike_changes_nothing():
    table = "NAMES = {'navy': '#000080', 'x': '#000081', 'y': '#000180', 'z': '#010080'}"
    assert reach(_task(), table + " # red '#ff0000'") == {"changed": 0, "unusable": 0,
                                                         "none_left": False}
    assert reach(_task(), "unrelated text") == {"changed": 0, "unusable": 0, "none_left": False}
