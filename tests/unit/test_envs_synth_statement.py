"""Problem statements from pytest failure reports: what they say and what they never say."""

from __future__ import annotations

import pytest
from swefleet.envs.synth.failures import failure_blocks, header_of, parse_failure
from swefleet.envs.synth.mutators import find_mutations
from swefleet.envs.synth.recipe import Recipe
from swefleet.envs.synth.statement import NoEvidence, write_statement

pytestmark = pytest.mark.unit

#: The buggy package the log below was produced with (`pytest -rA`, pytest 7.2, Python 3.11).
PKG = 'def window(n, seq):\n    out = []\n    for i in range(len(seq) - n):\n        out.append(tuple(seq[i:i + n]))\n    return out\n\ndef _inner(x):\n    return x[10]\n\ndef first_big(xs):\n    return _inner(xs)\n\nclass Box:\n    def __init__(self, v):\n        self.v = v\n    def get(self):\n        return self.v[3]\n\ndef chained(x):\n    try:\n        return x[5]\n    except IndexError:\n        return x - 1\n'
UTILS = 'def check(f):\n    return f()\n'

#: Its FAILURES section, verbatim.
LOG = '=================================== FAILURES ===================================\n_________________________________ test_window __________________________________\n\n    def test_window():\n>       assert window(2, [1, 2, 3, 4]) == [(1, 2), (2, 3), (3, 4)]\nE       assert [(1, 2), (2, 3)] == [(1, 2), (2, 3), (3, 4)]\nE         Right contains one more item: (3, 4)\nE         Use -v to get more diff\n\ntest_pkg.py:5: AssertionError\n_________________________________ test_big[1] __________________________________\n\nn = 1\n\n    @pytest.mark.parametrize("n", [1, 2])\n    def test_big(n):\n>       assert first_big([1, 2]) == n\n\ntest_pkg.py:9: \n_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ \npkg/__init__.py:11: in first_big\n    return _inner(xs)\n_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ \n\nx = [1, 2]\n\n    def _inner(x):\n>       return x[10]\nE       IndexError: list index out of range\n\npkg/__init__.py:8: IndexError\n_________________________________ test_big[2] __________________________________\n\nn = 2\n\n    @pytest.mark.parametrize("n", [1, 2])\n    def test_big(n):\n>       assert first_big([1, 2]) == n\n\ntest_pkg.py:9: \n_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ \npkg/__init__.py:11: in first_big\n    return _inner(xs)\n_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ \n\nx = [1, 2]\n\n    def _inner(x):\n>       return x[10]\nE       IndexError: list index out of range\n\npkg/__init__.py:8: IndexError\n_______________________________ TestBox.test_get _______________________________\n\nself = <test_pkg.TestBox object at 0x7f9140423690>\n\n    def test_get(self):\n        b = Box([1])\n>       assert b.get() == 1\n\ntest_pkg.py:14: \n_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ \n\nself = <pkg.Box object at 0x7f9140423690>\n\n    def get(self):\n>       return self.v[3]\nE       IndexError: list index out of range\n\npkg/__init__.py:17: IndexError\n__________________________________ test_multi __________________________________\n\n    def test_multi():\n>       assert window(\n            1, [1, 2]\n        ) == [(1,), (2,)]\nE       assert [(1,)] == [(1,), (2,)]\nE         Right contains one more item: (2,)\nE         Use -v to get more diff\n\ntest_pkg.py:17: AssertionError\n_________________________________ test_chained _________________________________\n\nx = [1]\n\n    def chained(x):\n        try:\n>           return x[5]\nE           IndexError: list index out of range\n\npkg/__init__.py:21: IndexError\n\nDuring handling of the above exception, another exception occurred:\n\n    def test_chained():\n>       assert chained([1]) == 0\n\ntest_pkg.py:25: \n_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ \n\nx = [1]\n\n    def chained(x):\n        try:\n            return x[5]\n        except IndexError:\n>           return x - 1\nE           TypeError: unsupported operand type(s) for -: \'list\' and \'int\'\n\npkg/__init__.py:23: TypeError\n_________________________________ test_helper __________________________________\n\n    def test_helper():\n        from pkg.utils import check\n>       assert check(lambda: first_big([1])) == 1\n\ntest_pkg.py:29: \n_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ \npkg/utils.py:2: in check\n    return f()\ntest_pkg.py:29: in <lambda>\n    assert check(lambda: first_big([1])) == 1\npkg/__init__.py:11: in first_big\n    return _inner(xs)\n_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ \n\nx = [1]\n\n    def _inner(x):\n>       return x[10]\nE       IndexError: list index out of range\n\npkg/__init__.py:8: IndexError\n_________________________________ test_printed _________________________________\n\n    def test_printed():\n        from helpers import same\n>       same([(1, 2)], window(2, [1, 2]))\n\ntest_pkg.py:33: \n_ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ _ \n\na = [(1, 2)], b = []\n\n    def same(a, b):\n        print("Expected:", a)\n        print("Got:", b)\n>       assert a == b\nE       AssertionError\n\nhelpers.py:4: AssertionError\n----------------------------- Captured stdout call -----------------------------\nExpected: [(1, 2)]\nGot: []\n==================================== PASSES ====================================\n=========================== short test summary info ============================\nPASSED test_pkg.py::test_ok\nFAILED test_pkg.py::test_window - assert [(1, 2), (2, 3)] == [(1, 2), (2, 3),...\nFAILED test_pkg.py::test_big[1] - IndexError: list index out of range\nFAILED test_pkg.py::test_big[2] - IndexError: list index out of range\nFAILED test_pkg.py::TestBox::test_get - IndexError: list index out of range\nFAILED test_pkg.py::test_multi - assert [(1,)] == [(1,), (2,)]\nFAILED test_pkg.py::test_chained - TypeError: unsupported operand type(s) for...\nFAILED test_pkg.py::test_helper - IndexError: list index out of range\nFAILED test_pkg.py::test_printed - AssertionError\n========================= 8 failed, 1 passed in 0.05s ==========================\n'

RECIPE = Recipe(package="pkg", version="1.0", sha256="0" * 64, repo="o/pkg",
                mutate=["pkg/*.py"], tests=["test_pkg.py"])


def mutation(kind: str, function: str):
    return next(m for m in find_mutations(PKG, "pkg/__init__.py")
                if m.kind == kind and m.function == function)


def statement(failing: list[str], kind: str, function: str) -> str:
    return write_statement(RECIPE, mutation(kind, function), LOG, failing,
                           {"pkg/__init__.py": PKG, "pkg/utils.py": UTILS})


def test_parse_failures_reads_code_errors_and_frames():
    blocks = failure_blocks(LOG)
    assert set(blocks) == {"test_window", "test_big[1]", "test_big[2]", "TestBox.test_get",
                           "test_multi", "test_chained", "test_helper", "test_printed"}
    f = parse_failure("test_big[1]", blocks["test_big[1]"])
    assert [(fr.path, fr.line) for fr in f.frames] == [
        ("test_pkg.py", 9), ("pkg/__init__.py", 11), ("pkg/__init__.py", 8)]
    assert f.exc_type == "IndexError"
    assert f.error == ["IndexError: list index out of range"]
    assert f.code_in({"test_pkg.py"}) == "assert first_big([1, 2]) == n"
    multi = parse_failure("test_multi", blocks["test_multi"])
    assert multi.code_in({"test_pkg.py"}) == "assert window(\n    1, [1, 2]\n) == [(1,), (2,)]"
    assert header_of("test_pkg.py::TestBox::test_get") == "TestBox.test_get"


def test_wrong_result_names_the_function_and_shows_the_check():
    text = statement(["test_pkg.py::test_window"], "wrong_operator", "window")
    assert text.startswith("`window` returns a wrong result\n")
    assert "pkg 1.0" in text
    assert "assert window(2, [1, 2, 3, 4]) == [(1, 2), (2, 3), (3, 4)]" in text
    assert "assert [(1, 2), (2, 3)] == [(1, 2), (2, 3), (3, 4)]" in text
    assert "Use -v" not in text


def test_exception_through_a_private_helper_names_the_public_function():
    text = statement(["test_pkg.py::test_big[1]", "test_pkg.py::test_big[2]"],
                     "off_by_one", "_inner")
    assert text.startswith("`first_big` raises IndexError\n")
    assert text.count("fails") == 1  # the two parametrized failures are one example
    assert "_inner" not in text


def test_method_failures_name_the_method():
    text = statement(["test_pkg.py::TestBox::test_get"], "off_by_one", "Box.get")
    assert text.startswith("`Box.get` raises IndexError")


def test_no_test_names_locations_or_addresses_leak():
    failing = ["test_pkg.py::test_window", "test_pkg.py::test_big[1]",
               "test_pkg.py::TestBox::test_get", "test_pkg.py::test_multi"]
    text = statement(failing, "wrong_operator", "window")
    for leak in ("test_", "TestBox", "test_pkg", ".py:", "0x7f", "line 1", "__init__.py"):
        assert leak not in text, leak
    assert text.count("```python") == 2  # at most two examples


def test_no_failure_report_means_no_statement():
    with pytest.raises(NoEvidence):
        statement(["test_pkg.py::test_ok"], "wrong_operator", "window")


def test_chained_exceptions_quote_the_tests_call_not_package_code():
    text = statement(["test_pkg.py::test_chained"], "wrong_operator", "chained")
    assert text.startswith("`chained` raises TypeError")
    assert "assert chained([1]) == 0" in text
    assert "return x" not in text


def test_helpers_outside_the_buggy_module_are_not_named():
    text = statement(["test_pkg.py::test_helper"], "off_by_one", "_inner")
    assert text.startswith("`first_big` raises IndexError")
    assert "assert check(lambda: first_big([1])) == 1" in text


NESTED = "def outer():\n    def inner(x):\n        return x > 1\n    return inner\n"
NESTED_LOG = """\
=================================== FAILURES ===================================
____________________________________ test_x ____________________________________

    def test_x():
>       assert f(1) is True
E       assert False is True
E       assert False is True

test_n.py:3: AssertionError
=========================== short test summary info ============================
"""


def test_without_a_package_frame_the_outer_function_of_the_bug_is_named():
    m = next(m for m in find_mutations(NESTED, "pkg/n.py") if m.kind == "flipped_comparison")
    assert m.function == "outer.inner"
    text = write_statement(RECIPE, m, NESTED_LOG, ["test_n.py::test_x"],
                           {"pkg/n.py": m.apply(NESTED)})
    assert text.startswith("`outer` returns a wrong result")
    assert "inner" not in text
    assert text.count("assert False is True") == 1  # repeated error lines once
    assert "module `pkg.n`" in text


def test_a_bare_assert_in_a_helper_shows_what_the_test_printed():
    f = parse_failure("test_printed", failure_blocks(LOG)["test_printed"])
    assert f.captured == ["Expected: [(1, 2)]", "Got: []"]
    assert f.error == ["AssertionError"]
    text = statement(["test_pkg.py::test_printed"], "wrong_operator", "window")
    assert text.startswith("`window` returns a wrong result")
    assert "same([(1, 2)], window(2, [1, 2]))" in text
    assert "AssertionError\n\nExpected: [(1, 2)]\nGot: []" in text
