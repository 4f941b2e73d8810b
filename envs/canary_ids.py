"""Node ids of renamed deciding tests and their twins (`envs/canary_twins.py`), both ways (no Docker).

The grader runs a FAIL_TO_PASS test under a secret name; the grade and the stored log report it
under its original id. The log's test output is the run's output with each renamed function's
id and its original's swapped (`swap_text`): the copy's lines read as the original's would have,
for swefleet's and swebench's parsers alike, and a line the run printed under an original's id
(which did not exist in the run) reads as the secret name's: a test that did not run, which
`envs/tamper.py` holds against the run. The swap is its own inverse: with the verdict's
`twins.renamed`, the raw output is the log's swapped back.
"""

from __future__ import annotations

import re
from functools import lru_cache


def node_parts(test_id: str) -> list[str]:
    """`path::Class::test_x[a::b]` -> [`path`, `Class`, `test_x[a::b]`]: split at the `::` of
    the node id only, never inside its parameters (a parametrized id may hold `::`)."""
    head, bracket, params = test_id.partition("[")
    parts = head.split("::")
    parts[-1] += bracket + params
    return parts


def function_id(test_id: str) -> str:
    """`path::Class::test_x[1-2]` -> `path::Class::test_x` (the parameters dropped)."""
    return test_id.split("[", 1)[0]


def function_names(test_ids) -> set[str]:
    """The test functions' own names: `path::Class::name[params]` -> `name`."""
    return {function_id(t).rpartition("::")[2] for t in test_ids}


def swap_text(text: str, renamed: dict[str, str]) -> str:
    """`text` with each function id of `renamed` (keys and values) and its counterpart swapped
    where it stands as a whole id (not part of a longer name or path)."""
    if not renamed:
        return text
    pairs = {**renamed, **{v: k for k, v in renamed.items()}}
    return _pattern(tuple(sorted(pairs, key=len, reverse=True))).sub(
        lambda m: pairs[m[0]], text)


@lru_cache(maxsize=64)
def _pattern(ids: tuple[str, ...]) -> re.Pattern:
    return re.compile(r"(?<![\w./-])(?:" + "|".join(map(re.escape, ids)) + r")(?![\w])")


def swap_id(test_id: str, renamed: dict[str, str]) -> str:
    """One test id with its function swapped as `swap_text` does (parameters kept)."""
    func = function_id(test_id)
    pairs = {**renamed, **{v: k for k, v in renamed.items()}}
    return pairs[func] + test_id[len(func):] if func in pairs else test_id


def report_ids(twins: dict, deciding: list[str]) -> set[str]:
    """The ids the grader looks up in the run's JUnit report for `twins` (a verdict's `twins`):
    the renamed copies of the deciding tests (under their run names) and the twins."""
    renamed = twins.get("renamed") or {}
    originals = set(renamed.values())
    copies = {swap_id(t, renamed) for t in deciding if function_id(t) in originals}
    return copies | set(twins.get("fail") or [])


def is_planted(test_id: str, verdict: dict) -> bool:
    """Whether `test_id` (as the log reports it) is the grader's: a canary, or any
    parametrization of a twin."""
    canaries = verdict.get("canaries") or {}
    if test_id in (canaries.get("pass") or []) or test_id in (canaries.get("fail") or []):
        return True
    return function_id(test_id) in set((verdict.get("twins") or {}).get("functions") or [])
