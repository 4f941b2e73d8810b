"""Two-bug tasks (`envs/synth/combine.py`): which pairs combine, what the combined record holds,
and that the draw of pairs is fixed by its seed. On the bundled PyPI set's own records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from swefleet.envs.synth.combine import (
    KIND,
    combinable,
    combine,
    patch_files,
    pick_pairs,
    split_patch,
)
from swefleet.envs.synth.repro import SECTION, reproduction_in

pytestmark = pytest.mark.unit
BUNDLED = Path(__file__).resolve().parents[2] / "envs" / "data" / "pypi" / "tasks.jsonl"
RECORDS = [json.loads(line) for line in BUNDLED.read_text().splitlines() if line.strip()]


def _pair(with_scripts: int = 0) -> tuple[dict, dict]:
    """A combinable pair of which `with_scripts` parts carry a reproduction (first part first)."""
    for a, b in pick_pairs(RECORDS, 50):
        scripts = [bool(a.get("reproduction")), bool(b.get("reproduction"))]
        if sum(scripts) == with_scripts and (with_scripts != 1 or scripts[0]):
            return a, b
    raise LookupError(f"no pair with {with_scripts} reproductions")


def test_a_combined_task_holds_both_bugs_and_both_suites():
    a, b = _pair(2)
    c = combine(a, b)
    assert c["bug_kind"] == KIND and c["split"] == a["split"] == b["split"]
    assert c["instance_id"].startswith(a["instance_id"].rsplit(".", 1)[0] + ".combined__")
    assert patch_files(c["patch"]) == patch_files(a["patch"]) | patch_files(b["patch"])
    assert set(c["FAIL_TO_PASS"]) == set(a["FAIL_TO_PASS"]) | set(b["FAIL_TO_PASS"])
    assert set(c["PASS_TO_PASS"]) == set(a["PASS_TO_PASS"]) | set(b["PASS_TO_PASS"])
    assert not set(c["FAIL_TO_PASS"]) & set(c["PASS_TO_PASS"])
    assert split_patch(c["patch"], c["synth"]["files"][0]).strip() == a["patch"].strip()
    assert split_patch(c["patch"], c["synth"]["files"][1]).strip() == b["patch"].strip()
    statement = c["problem_statement"]  # both titles, one reproduction: the first part's
    for part in (a, b):
        assert part["problem_statement"].split("\n", 1)[0] in statement
    assert statement.count(SECTION) == 1
    assert reproduction_in(statement) == a["reproduction"] == c["reproduction"]
    assert statement.index(SECTION) < statement.index("## 2.")


def test_the_second_part_s_reproduction_is_kept_when_the_first_has_none():
    b, a = _pair(1)  # b has one, a none
    c = combine(a, b)
    assert reproduction_in(c["problem_statement"]) == b["reproduction"] == c["reproduction"]
    assert c["problem_statement"].index(SECTION) > c["problem_statement"].index("## 2.")


def test_parts_must_share_a_package_and_split_and_touch_different_files():
    a, b = _pair(2)
    assert combinable(a, b) and combinable(b, a)
    assert not combinable(a, a)  # one source file
    assert not combinable(a, {**b, "split": "test" if a["split"] != "test" else "train"})
    other = next(r for r in RECORDS if r["repo"] != a["repo"])
    assert not combinable(a, other)
    same_tests = {**b, "test_files": a["test_files"]}
    assert not combinable(a, same_tests)
    assert not combinable(combine(a, b), b)  # a combined task is not combined again
    with pytest.raises(ValueError, match="cannot be combined"):
        combine(a, a)


def test_pairs_are_fixed_by_the_seed_and_use_each_task_once():
    first, again = pick_pairs(RECORDS, 2, seed=0), pick_pairs(RECORDS, 2, seed=0)
    ids = [(a["instance_id"], b["instance_id"]) for a, b in first]
    assert ids == [(a["instance_id"], b["instance_id"]) for a, b in again]
    assert ids != [(a["instance_id"], b["instance_id"]) for a, b in pick_pairs(RECORDS, 2, 1)]
    used = [i for pair in ids for i in pair]
    assert len(used) == len(set(used))
    per_group: dict[tuple, int] = {}
    for a, _ in first:
        per_group[(a["repo"], a["split"])] = per_group.get((a["repo"], a["split"]), 0) + 1
    assert max(per_group.values()) <= 2
