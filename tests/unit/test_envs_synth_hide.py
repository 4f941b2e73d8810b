"""Hiding the deciding tests: removed from the base state, restored exactly by the test patch."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from swefleet.envs.synth.hide import hide_tests, split_test_id

pytestmark = pytest.mark.unit

TESTS = """\
import pytest


def test_a():
    assert 1


@pytest.mark.parametrize("x", [1, 2])
def test_b(x):
    assert x


class TestC:
    def test_only(self):
        assert 1


class TestD:
    def test_one(self):
        assert 1

    def test_two(self):
        assert 2
"""

MIXIN = """\
class Mixin:
    def test_inherited(self):
        assert 1


class OtherMixin:
    def test_inherited(self):
        assert 2
"""

SUBCLASS = """\
from tests import OtherMixin, Mixin


class TestLRU(Mixin):
    pass


class TestLFU(OtherMixin):
    pass
"""


def apply(tmp_path: Path, files: dict[str, str], patch: str) -> dict[str, str]:
    """Apply `patch` with `git apply` to `files` written under tmp_path; the files after."""
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "p.diff").write_text(patch)
    subprocess.run(["git", "apply", "p.diff"], cwd=tmp_path, check=True)
    return {name: (tmp_path / name).read_text() for name in files}


def test_split_test_id():
    assert split_test_id("t/test_x.py::TestC::test_y[a b-1]") == ("t/test_x.py", ["TestC"], "test_y")
    assert split_test_id("t/test_x.py::test_y") == ("t/test_x.py", [], "test_y")


def test_functions_parametrized_tests_and_methods_are_removed_and_restored(tmp_path):
    ids = ["tests/test_m.py::test_b[1]", "tests/test_m.py::TestD::test_two",
           "tests/test_m.py::TestC::test_only"]
    hidden, patch = hide_tests({"tests/test_m.py": TESTS}, ids)
    base = hidden["tests/test_m.py"]
    assert "def test_a" in base and "def test_one" in base
    for gone in ("def test_b", "parametrize", "def test_two", "def test_only"):
        assert gone not in base
    assert "class TestC:\n    pass\n" in base  # an emptied class still parses
    assert apply(tmp_path, {"tests/test_m.py": base}, patch) == {"tests/test_m.py": TESTS}


def test_inherited_test_methods_are_found_through_the_base_classes(tmp_path):
    sources = {"tests/test_m.py": TESTS, "tests/__init__.py": MIXIN,
               "tests/test_sub.py": SUBCLASS}
    hidden, patch = hide_tests(sources, ["tests/test_sub.py::TestLFU::test_inherited"])
    assert list(hidden) == ["tests/__init__.py"]
    assert "assert 2" not in hidden["tests/__init__.py"]  # OtherMixin's, not Mixin's
    assert "assert 1" in hidden["tests/__init__.py"]
    restored = apply(tmp_path, {"tests/__init__.py": hidden["tests/__init__.py"]}, patch)
    assert restored == {"tests/__init__.py": MIXIN}


def test_unknown_tests_and_unsafe_files_are_refused():
    assert hide_tests({"tests/test_m.py": TESTS}, ["tests/test_m.py::test_nope"]) is None
    no_newline = TESTS.rstrip("\n")
    assert hide_tests({"tests/test_m.py": no_newline}, ["tests/test_m.py::test_a"]) is None
