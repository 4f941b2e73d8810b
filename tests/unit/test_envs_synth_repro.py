"""Reproduction scripts built from a hidden test: what they carry, what they refuse, and the
issue section that holds them (the runs that check them are in the integration tests)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
from swefleet.envs.synth.repro import (
    SECTION,
    build_script,
    imported_modules,
    reproduction_in,
    save_and_run,
    with_reproduction,
    without_reproduction,
)

pytestmark = pytest.mark.unit

TESTS = textwrap.dedent('''\
    import math
    import os, re
    import pytest
    from common import assert_equal, unused_helper as _u

    SCALE = 3


    def scaled(x):
        return x * SCALE


    @pytest.fixture
    def data():
        return [1, 2]


    def test_plain():
        """Doc of the test."""
        # the input
        value = scaled(2)
        assert_equal(6, value)
        assert math.floor(2.5) == 2


    def test_with_fixture(data):
        assert data


    @pytest.mark.parametrize("x", [1, 2])
    def test_param(x):
        assert x


    def test_uses_other_test():
        test_plain()


    class TestCase1:
        def test_method(self):
            assert scaled(1) == 3

        def test_needs_helper(self):
            assert self.helper()


    class Legacy(unittest.TestCase):
        def test_unittest(self):
            self.assertEqual(scaled(1), 3)
    ''')
COMMON = textwrap.dedent('''\
    import pprint


    def assert_equal(expected, result):
        print("Expected:", pprint.pformat(expected))
        assert expected == result


    def unused_helper():
        return 1
    ''')
SOURCES = {"tests/test_x.py": TESTS}
LOCAL = {"common": COMMON}


def run(script: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=False)


def test_plain_test_becomes_a_script_with_its_helpers_inlined():
    script = build_script(SOURCES, "tests/test_x.py::test_plain", LOCAL)
    assert script.startswith("import math\nimport pprint\n")
    assert "def assert_equal" in script and "def scaled" in script and "SCALE = 3" in script
    assert "unused_helper" not in script and "import os" not in script  # only what is used
    assert "test_plain" not in script and "Doc of the test" not in script
    assert "# the input" in script
    assert run(script).returncode == 0


def test_script_fails_when_the_checked_value_is_wrong():
    script = build_script(SOURCES, "tests/test_x.py::test_plain", LOCAL)
    broken = run(script.replace("SCALE = 3", "SCALE = 4"))
    assert broken.returncode == 1 and "AssertionError" in broken.stderr
    assert "Expected: 6" in broken.stdout


def test_without_the_local_module_the_import_stays():
    script = build_script(SOURCES, "tests/test_x.py::test_plain")
    assert "from common import assert_equal\n" in script


@pytest.mark.parametrize("test_id", [
    "tests/test_x.py::test_with_fixture",
    "tests/test_x.py::test_param[1]",
    "tests/test_x.py::test_uses_other_test",
    "tests/test_x.py::test_missing",
    "tests/other.py::test_plain",
])
def test_tests_a_script_cannot_carry_get_none(test_id):
    assert build_script(SOURCES, test_id, LOCAL) == ""


def test_methods_run_on_a_bare_testcase():
    plain = build_script(SOURCES, "tests/test_x.py::TestCase1::test_method", LOCAL)
    assert "self" not in plain and run(plain).returncode == 0
    legacy = build_script(SOURCES, "tests/test_x.py::Legacy::test_unittest", LOCAL)
    assert "case = unittest.TestCase()\ncase.assertEqual(scaled(1), 3)" in legacy
    assert "self" not in legacy and run(legacy).returncode == 0
    helper = build_script(SOURCES, "tests/test_x.py::TestCase1::test_needs_helper", LOCAL)
    assert run(helper).returncode != 0  # needs its class: the check run drops it


def test_long_tests_get_none():
    body = "".join(f"    assert {i} == {i}\n" for i in range(60))
    assert build_script({"t.py": f"def test_long():\n{body}"}, "t.py::test_long") == ""


def test_imported_modules_are_plain_from_imports():
    assert imported_modules(TESTS) == ["common"]


STATEMENT = "`f` returns a wrong result\n\nI am using p 1.0.\n\nIt fails.\n\nI expected more."


def test_issue_section_round_trip():
    script = "import p\nassert p.f() == 1\n"
    with_one = with_reproduction(STATEMENT, script)
    assert with_one.index("It fails.") < with_one.index(SECTION) < with_one.index("I expected")
    assert reproduction_in(with_one) == script
    assert with_reproduction(with_one, script) == with_one  # idempotent
    assert without_reproduction(with_one).strip() == STATEMENT
    assert reproduction_in(STATEMENT) == ""


def test_save_and_run_survives_a_script_that_holds_the_delimiter(tmp_path):
    script = "print('EOF')\nEOF = 1\nprint(EOF)"
    command = save_and_run(script).replace("/tmp/repro.py", str(tmp_path / "r.py"))
    out = subprocess.run(["bash", "-c", command], capture_output=True, text=True, check=True)
    assert out.stdout == "EOF\n1\n"


def test_an_infrastructure_failure_keeps_the_reproduction_a_task_had():
    from swefleet.envs.synth.repro_check import Found, update_records

    script = "from pkg import f\nassert f() == 1\n"
    records = [{"instance_id": "a", "problem_statement": "Bug.", "reproduction": script},
               {"instance_id": "b", "problem_statement": "Bug.", "reproduction": script}]
    before = dict(records[0])
    changed = update_records(records, [Found("a", "", "infra: TimeoutError"),
                                       Found("b", "", "passes_on_bug")])
    assert records[0] == before  # the sandbox failed: nothing was learned about task a
    assert records[1]["reproduction"] == "" and changed == 1
