"""A planted test file always collects, and one that does not is never a verdict (no Docker)."""

from __future__ import annotations

import ast
import json
import random
import subprocess
import sys

import pytest
from swefleet.envs import canary, canary_ids, canary_twins
from swefleet.envs import gradelog as g
from swefleet.envs.tamper import junit_collect_errors

from swefleet.types import GradeCause, GradeStatus, Task

pytestmark = pytest.mark.unit

PATH = "tests/test_cli.py"
# The failing pattern: a helper defined at module level between tests, called by a deciding
# test's parametrize list (evaluated when the file is imported).
SOURCE = '''from contextlib import contextmanager

import pytest
from mypkg.core import bump


def test_first():
    assert bump(1) == 2


@contextmanager
def does_not_raise(item):
    yield item


@pytest.mark.parametrize("n,expectation", [(1, does_not_raise(2)), (5, does_not_raise(6))])
def test_bump(n, expectation):
    with expectation as expected:
        assert bump(n) == expected


def test_last():
    assert bump(0) == 1
'''
F2P = [f"{PATH}::test_bump[1-expectation0]", f"{PATH}::test_bump[5-expectation1]"]
P2P = [f"{PATH}::test_first", f"{PATH}::test_last"]
FIXED = "def bump(n):\n    return n + 1\n"


def plant(seed: int) -> tuple[str, dict]:
    rng = random.Random(seed)
    text, twins = canary_twins.plant(SOURCE, PATH, F2P, F2P + P2P, rng)
    text, must_pass, must_fail = canary.plant(text, PATH, rng, {"test_bump"})
    names = {i.rpartition("::")[2] for i in [*twins.renamed, *twins.functions, *must_pass,
                                             *must_fail]}
    return text, {"canaries": {"pass": must_pass, "fail": must_fail}, "twins": twins.as_dict(),
                  "planted": {PATH: canary_twins.planted_lines(text, names)}}


def run_pytest(root, package: str, text: str, verdict: dict | None = None) -> tuple[str, int]:
    """pytest over the planted file; with `verdict`, its JUnit report's collection errors are
    recorded there as the grader records them."""
    (root / "mypkg").mkdir(exist_ok=True)
    (root / "mypkg/__init__.py").write_text("")
    (root / "mypkg/core.py").write_text(package)
    (root / "tests").mkdir(exist_ok=True)
    (root / PATH).write_text(text)
    report = root / "junit.xml"
    done = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider",
                           f"--junitxml={report}", PATH],
                          cwd=root, capture_output=True, check=False, text=True)
    if verdict is not None:
        verdict["collect_errors"] = junit_collect_errors(report.read_bytes())
    return done.stdout, done.returncode


def graded(output: str, rc: int, verdict: dict):
    task = Task(instance_id="d", repo="d/d", problem_statement="x", image="i",
                FAIL_TO_PASS=F2P, PASS_TO_PASS=P2P)
    verdict = {"phase": "tests", "exit_code": rc, "timed_out": False, **verdict}
    renamed = (verdict.get("twins") or {}).get("renamed") or {}
    log = (f"{g.START_TEST_OUTPUT}\n{canary_ids.swap_text(output, renamed)}\n"
           f"{g.END_TEST_OUTPUT}\n{g.VERDICT}{json.dumps(verdict)}\n")
    return g.regrade_from_log(task, log)


def test_a_copy_never_goes_above_a_name_its_decorators_use():
    helper = SOURCE.split("\n").index("def does_not_raise(item):") + 1  # 1-based
    tree = ast.parse(SOURCE)
    _, scope = canary_twins.find_function(tree, ["test_bump"])
    assert all(s == -1 or s >= helper for s in scope.spots)  # not before the helper
    for seed in range(200):
        text, _ = plant(seed)
        body = ast.parse(text).body
        where = next(n.lineno for n in body if getattr(n, "name", "") == "does_not_raise")
        copies = [n for n in body if isinstance(n, ast.FunctionDef) and n.decorator_list
                  and "does_not_raise" in ast.unparse(n.decorator_list[0])]
        assert len(copies) == 1 + canary_twins.TWINS
        assert all(n.lineno > where for n in copies), (seed, text)


def test_the_planted_file_collects_and_the_fix_resolves(tmp_path):
    for seed in range(4):
        text, verdict = plant(seed)
        out, rc = run_pytest(tmp_path, FIXED, text)
        assert "NameError" not in out, out
        r = graded(out, rc, verdict)
        assert r.status == GradeStatus.resolved, (seed, r.reason, out)


def test_a_plant_that_fails_to_collect_is_infra_never_a_verdict(tmp_path):
    """A copy placed above the helper (the old bug, forced here): an infra error, retried."""
    text, verdict = plant(0)
    lines = text.split("\n")
    (start, end), = [r for r in verdict["planted"][PATH]
                     if "does_not_raise" in "\n".join(lines[r[0] - 1:r[1]])][:1]
    block = lines[start - 1:end]
    del lines[start - 1:end]
    top = lines.index("from mypkg.core import bump") + 1
    lines[top:top] = ["", "", *block]
    broken = "\n".join(lines)
    names = {n.name for n in ast.walk(ast.parse(broken)) if isinstance(n, ast.FunctionDef)
             and n.name not in ("does_not_raise", "test_first", "test_last")}
    verdict["planted"] = {PATH: canary_twins.planted_lines(broken, names)}
    out, rc = run_pytest(tmp_path, FIXED, broken, verdict)
    assert "NameError: name 'does_not_raise' is not defined" in out, out
    assert verdict["collect_errors"] == ["tests.test_cli"]
    r = graded(out, rc, verdict)
    assert (r.status, r.cause) == (GradeStatus.error, GradeCause.infra), r.reason
    assert g.is_infra(r) and g.reward_of(r) is None
    assert "planted test file failed to collect" in r.reason
    # the same log without pytest's own report of the failure: printed by the tested code
    r = graded(out, rc, {**verdict, "collect_errors": []})
    assert (r.status, r.cause) == (GradeStatus.unresolved, GradeCause.tests), r.reason


def test_a_patch_that_breaks_the_package_import_is_still_unresolved(tmp_path):
    text, verdict = plant(1)
    out, rc = run_pytest(tmp_path, "raise ImportError('broken by the patch')\n", text, verdict)
    assert "ERROR collecting" in out, out
    r = graded(out, rc, verdict)
    assert (r.status, r.cause) == (GradeStatus.unresolved, GradeCause.tests), r.reason
    # a NameError the package raises (not on a planted line) is the patch's too
    out, rc = run_pytest(tmp_path, "undefined_name\n", text, verdict)
    assert "NameError" in out, out
    r = graded(out, rc, verdict)
    assert (r.status, r.cause) == (GradeStatus.unresolved, GradeCause.tests), r.reason
