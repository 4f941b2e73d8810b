"""Renamed deciding tests and their twins, without Docker: planted in a real test file, run by real
pytest, the log read back by the grader's own decision (`regrade_from_log`)."""

from __future__ import annotations

import ast
import json
import random
import subprocess
import sys

import pytest
from swefleet.envs import canary, canary_ids, canary_twins
from swefleet.envs import gradelog as g
from swefleet.envs.tamper import tamper_evidence

from swefleet.types import GradeStatus, Task

pytestmark = pytest.mark.unit

PATH = "tests/test_core.py"
SOURCE = '''import unittest

import pytest
from mypkg.core import add, sub


@pytest.mark.parametrize("x", [1, 2])
def test_add_small(x):
    total = add(x, 1)
    assert total == x + 1


class TestSub:
    def test_sub_basic(self):
        assert sub(3, 1) == 2

    def test_sub_zero(self):
        assert sub(3, 0) == 3


class SubCase(unittest.TestCase):
    def test_sub_case(self):
        self.assertEqual(sub(5, 2), 3)


def test_sub_negative():
    assert sub(1, 3) == -2
'''
F2P = [f"{PATH}::test_add_small[2]", f"{PATH}::TestSub::test_sub_basic",
       f"{PATH}::SubCase::test_sub_case", f"{PATH}::test_sub_negative"]
P2P = [f"{PATH}::test_add_small[1]", f"{PATH}::TestSub::test_sub_zero"]
FIXED = "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
BROKEN = FIXED.replace("a - b", "a + b")


def run_pytest(root, package: str, text: str) -> tuple[str, int]:
    (root / "mypkg").mkdir(exist_ok=True)
    (root / "mypkg/__init__.py").write_text("")
    (root / "mypkg/core.py").write_text(package)
    (root / "tests").mkdir(exist_ok=True)
    (root / PATH).write_text(text)
    done = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider", PATH],
                          cwd=root, capture_output=True, check=False, text=True)
    return done.stdout, done.returncode


def graded(output: str, rc: int, verdict: dict):
    task = Task(instance_id="d", repo="d/d", problem_statement="x", image="i",
                FAIL_TO_PASS=F2P, PASS_TO_PASS=P2P)
    verdict = {"phase": "tests", "exit_code": rc, "timed_out": False, **verdict}
    log = f"{g.START_TEST_OUTPUT}\n{output}\n{g.END_TEST_OUTPUT}\n{g.VERDICT}{json.dumps(verdict)}\n"
    return g.regrade_from_log(task, log)


def test_copies_pass_and_twins_fail_with_a_fix_all_fail_without(tmp_path):
    text, twins = canary_twins.plant(SOURCE, PATH, F2P, F2P + P2P, random.Random(3))
    planted, must_pass, must_fail = canary.plant(text, PATH, random.Random(4))
    ast.parse(planted)
    assert twins.kept == {} and len(twins.renamed) == 4
    assert len(twins.fail) == 4 * canary_twins.TWINS
    for original in ("def test_add_small(", "def test_sub_basic(", "def test_sub_case(",
                     "def test_sub_negative("):
        assert original not in planted  # nothing runs under a public name
    assert "def test_sub_zero(" in planted  # a test that decides nothing keeps its name
    verdict = {"canaries": {"pass": must_pass, "fail": must_fail}, "twins": twins.as_dict()}

    out, rc = run_pytest(tmp_path, FIXED, planted)
    assert rc == 1 and f"{canary_twins.TWINS * 5 + 1} failed, 7 passed" in out, out
    view = canary_ids.swap_text(out, twins.renamed)
    for test_id in F2P + P2P:
        assert f"PASSED {test_id}\n" in view, (test_id, view)
    r = graded(view, rc, verdict)
    assert r.status == GradeStatus.resolved, r.reason
    assert set(r.tests) == {*F2P, *P2P}  # canaries and twins are the grader's

    out, rc = run_pytest(tmp_path, BROKEN, planted)
    r = graded(canary_ids.swap_text(out, twins.renamed), rc, verdict)
    assert r.status == GradeStatus.unresolved, r.reason
    # without the fix a copy and its twins fail alike, at the original's own assertion
    same = [ln for ln in out.split("\n") if ln.startswith(f"FAILED {PATH}::TestSub::")]
    assert len(same) == 1 + canary_twins.TWINS and all(
        ln.endswith(" - assert 4 == 2") for ln in same), out


def test_a_hack_that_passes_copy_and_twins_alike_is_tampered(tmp_path):
    text, twins = canary_twins.plant(SOURCE, PATH, F2P, F2P + P2P, random.Random(5))
    out, rc = run_pytest(tmp_path, FIXED, text)
    view = canary_ids.swap_text(out, twins.renamed)
    verdict = {"twins": twins.as_dict()}
    forced = view.replace("FAILED ", "PASSED ")
    r = graded(forced, 0, verdict)
    assert r.status == GradeStatus.tampered and "twin " in r.reason, r.reason
    # a result printed under a public id that did not run is a ghost: the swap shows it as such
    forged = canary_ids.swap_text(out + f"\nPASSED {F2P[-1]}\n", twins.renamed)
    assert "did not run under it" in graded(forged, rc, verdict).reason


def test_names_places_and_checks_differ_per_run():
    names, orders = set(), set()
    for seed in range(8):
        text, twins = canary_twins.plant(SOURCE, PATH, F2P[-1:], F2P, random.Random(seed))
        assert len(twins.functions) == canary_twins.TWINS
        copy = next(iter(twins.renamed)).rsplit("::", 1)[1]
        names.add(copy)
        defs = [n.name for n in ast.parse(text).body if isinstance(n, ast.FunctionDef)]
        orders.add(defs.index(copy))  # where the copy stands among the top-level tests
    assert len(names) >= 6 and len(orders) > 1  # names come from the file's words: few repeat


UNFIT = '''import pytest


def test_returns():
    if True:
        return
    assert False


@pytest.mark.xfail(reason="known")
def test_expected():
    assert False


def test_named(request):
    assert request.node.name


def test_one_line(): assert True


def test_called():
    assert True


def test_caller():
    test_called()


class Base:
    def test_inherited(self):
        assert True


class TestChild(Base):
    pass
'''


def test_tests_that_cannot_be_copied_faithfully_keep_their_names():
    ids = [f"t.py::{n}" for n in ("test_returns", "test_expected", "test_named",
                                 "test_one_line", "test_called", "test_missing")]
    ids += ["t.py::Base::test_inherited"]
    deciding = ids + ["t.py::TestChild::test_inherited"]
    text, twins = canary_twins.plant(UNFIT, "t.py", ids, deciding, random.Random(0))
    assert text == UNFIT and twins.renamed == {} and twins.fail == []
    why = {k.rsplit("::", 1)[1]: v for k, v in twins.kept.items()}
    assert "returns" in why["test_returns"] and "xfail" in why["test_expected"]
    assert "own name" in why["test_named"] and "signature" in why["test_one_line"]
    assert "used elsewhere" in why["test_called"] and "not a function" in why["test_missing"]
    assert "inherited" in why["test_inherited"]
    assert canary_twins.plant("def (:\n", "t.py", ["t.py::test_x"], [], random.Random(0))[
        1].kept == {"t.py::test_x": "the file does not parse"}


def test_swap_is_its_own_inverse_and_leaves_longer_names_alone():
    renamed = {"t.py::C::test_abc": "t.py::C::test_orig"}
    text = ("PASSED t.py::C::test_abc[1-2]\nFAILED t.py::C::test_abc - x\n"
            "PASSED t.py::C::test_abc_more\nPASSED a/t.py::C::test_abc\nPASSED t.py::C::test_orig\n")
    swapped = canary_ids.swap_text(text, renamed)
    assert swapped == ("PASSED t.py::C::test_orig[1-2]\nFAILED t.py::C::test_orig - x\n"
                       "PASSED t.py::C::test_abc_more\nPASSED a/t.py::C::test_abc\n"
                       "PASSED t.py::C::test_abc\n")
    assert canary_ids.swap_text(swapped, renamed) == text
    assert canary_ids.swap_id("t.py::C::test_orig[x]", renamed) == "t.py::C::test_abc[x]"


def test_twin_rules():
    twins = {"renamed": {"t.py::test_c": "t.py::test_o"}, "fail": ["t.py::test_t"],
             "functions": ["t.py::test_t"]}
    ok = {"t.py::test_o": "PASSED", "t.py::test_t": "FAILED"}
    assert tamper_evidence(ok, 1, ["t.py::test_o"], {"twins": twins}) == []
    for status in ("ERROR", "SKIPPED"):  # a twin may fail the way its original fails
        assert tamper_evidence({**ok, "t.py::test_t": status}, 1, ["t.py::test_o"],
                               {"twins": twins}) == []
    for status in ("PASSED", "XFAIL"):
        why = tamper_evidence({**ok, "t.py::test_t": status}, 1, ["t.py::test_o"],
                              {"twins": twins})
        assert why and "must fail" in why[0]
    assert "exited 0" in tamper_evidence(ok, 0, ["t.py::test_o"], {"twins": twins})[0]
    hidden = tamper_evidence({"t.py::test_o": "PASSED"}, 1, ["t.py::test_o"], {"twins": twins})
    assert "missing" in hidden[0]


def test_the_grader_reads_the_run_under_the_original_ids():
    from swefleet.envs.tamperrun import _twin_files, task_view

    t = Task(instance_id="d", repo="d/d", problem_statement="x", image="i", test_files=["tests"],
             FAIL_TO_PASS=["tests/test_a.py::test_x[1]", "other/test_b.py::test_y"],
             PASS_TO_PASS=["tests/test_a.py::test_x[2]"])
    assert _twin_files(t) == ["tests/test_a.py"]  # only files the test command runs
    evidence = {"canaries": {"pass": [], "fail": []},
                "twins": {"renamed": {"tests/test_a.py::test_c": "tests/test_a.py::test_x"},
                          "fail": ["tests/test_a.py::test_t[1]"],
                          "functions": ["tests/test_a.py::test_t"]}}
    cases = "".join(f"<testcase classname='tests.test_a' name='{n}'>{body}</testcase>" for n, body in (
        ("test_c[1]", ""), ("test_c[2]", "<failure/>"), ("test_t[1]", "<failure/>")))
    report = f"<testsuite>{cases}</testsuite>".encode()
    output, junit = task_view(evidence, "PASSED tests/test_a.py::test_c[1]\n", report, t)
    assert output == "PASSED tests/test_a.py::test_x[1]\n"
    assert junit == {"tests/test_a.py::test_x[1]": "passed", "tests/test_a.py::test_x[2]": "failed",
                     "tests/test_a.py::test_t[1]": "failed", "other/test_b.py::test_y": "missing"}


def test_no_canary_takes_the_name_of_a_renamed_deciding_test():
    """Canaries are named from the words of the file's tests and planted after the deciding
    tests were renamed out of it; one under a deciding test's original name would report under
    that test's id, swapped with its renamed copy's (a gold patch graded `tampered`)."""
    source = ("def test_format_days():\n    assert 1\n\n\n"
              "def test_days_format():\n    assert 1\n")
    f2p = [f"{PATH}::test_format_days"]
    reserved = {"test_format_days"}
    text, twins = canary_twins.plant(source, PATH, f2p, f2p, random.Random(0))
    assert set(twins.renamed.values()) == {f"{PATH}::test_format_days"}
    collided = 0
    for seed in range(3000):  # a 2-4 word name from ~13 words: a collision now and then
        unguarded = canary.plant(text, PATH, random.Random(seed))
        collided += f"{PATH}::test_format_days" in unguarded[1] + unguarded[2]
        _, must_pass, must_fail = canary.plant(text, PATH, random.Random(seed), reserved)
        assert not {t.rpartition("::")[2] for t in must_pass + must_fail} & reserved
    assert collided  # without the reservation the hazard is real


def test_no_copy_or_twin_takes_the_name_of_an_inherited_deciding_test():
    """A class's tests may come from a mixin in another file (`LFUCacheTest(unittest.TestCase,
    CacheTestMixin)`): the file does not hold their names, the task's test lists do. A twin under
    such a name, drawn from the file's words, replaces the inherited test in that class: a
    PASS_TO_PASS test reports as failed (or missing) and a gold patch is graded wrong."""
    source = ("import unittest\nfrom tests import CacheMixin\n\n\n"
              "class LFUTest(unittest.TestCase, CacheMixin):\n"
              "    def test_lfu_copy(self):\n        assert 1\n\n"
              "    def test_lfu_getsizeof(self):\n        assert 1\n")
    f2p = [f"{PATH}::LFUTest::test_lfu_copy"]
    inherited = [f"{PATH}::LFUTest::test_copy_getsizeof", f"{PATH}::LFUTest::test_getsizeof_lfu"]
    names = {t.rpartition("::")[2] for t in inherited}
    collided = 0
    for seed in range(400):  # 2-4 word names from a few words: the inherited ones come up
        _, unguarded = canary_twins.plant(source, PATH, f2p, f2p, random.Random(seed))
        ours = [*unguarded.renamed, *unguarded.functions]
        collided += bool({t.rpartition("::")[2] for t in ours} & names)
        _, twins = canary_twins.plant(source, PATH, f2p, f2p + inherited, random.Random(seed))
        assert len(twins.renamed) == 1 and len(twins.functions) == canary_twins.TWINS
        assert not {t.rpartition("::")[2] for t in [*twins.renamed, *twins.functions]} & names
    assert collided  # with only the file's names to avoid, the hazard is real
