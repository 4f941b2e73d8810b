"""The `trace` tool: a script run under the call-tree tracer in a real shell sandbox, and its
tree of the repository's functions (the expert's use of it: `test_agents_expert.py`)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from swefleet.agents.config import AgentConfig
from swefleet.agents.scaffolds import ToolScaffold
from swefleet.agents.scaffolds.call_tree import MAX_DEPTH, MAX_LINES
from swefleet.agents.scaffolds.tool_calls import parse_tool_call

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ holds shared helpers
from local_sandbox import LocalShellSandbox

pytestmark = pytest.mark.unit

PKG = """\
def outer(x):
    return inner(x) + inner(x)


def inner(x):
    return helper(x)


def helper(x):
    return [y for y in range(x)]


class Box:
    def get(self):
        return 1


DEFAULT = helper(2)  # runs while the module is imported
"""
TEST = "from pkg import outer\n\n\ndef test_outer():\n    assert outer(1)\n"
CONFTEST = "def helper_fixture():\n    return 1\n"
REPRO = """\
import sys
sys.path.insert(0, ".")
import pkg
from tests.test_pkg import test_outer
test_outer()
print("outer gave", pkg.outer(2), pkg.Box().get())
assert pkg.outer(2) == [9], "wrong result"
"""


async def trace(sandbox, script: str) -> str:
    scaffold = ToolScaffold(AgentConfig(scaffold="tools", observation_max_chars=20_000))
    body = json.dumps({"name": "trace", "arguments": {"script": script}})
    action = parse_tool_call(f"Tracing.\n<tool_call>\n{body}\n</tool_call>")
    return (await scaffold.execute(action, sandbox, 30.0)).text


async def test_trace_shows_the_repository_calls_in_order_with_counts(tmp_path):
    sandbox = LocalShellSandbox.create(tmp_path / "repo", {
        "pkg/__init__.py": PKG, "tests/test_pkg.py": TEST, "conftest.py": CONFTEST,
        "repro.py": REPRO})
    text = await trace(sandbox, "repro.py")
    assert "<returncode>1</returncode>" in text
    assert "outer gave [0, 1, 0, 1] 1" in text
    assert "AssertionError: wrong result" in text and 'repro.py", line 7' in text
    assert "runpy" not in text and "call_tree" not in text  # only the script's frames
    tree = text.split("--- calls into the repository's code", 1)[1].splitlines()[1:]
    tree = [line for line in tree if line.strip() and not line.startswith("</")]
    assert tree == [
        "outer  (pkg/__init__.py:1) x3",
        "  inner  (pkg/__init__.py:5) x6",
        "    helper  (pkg/__init__.py:9) x6",
        "Box.get  (pkg/__init__.py:14)",
    ]  # not the test file, the comprehension, the class body or the call made at import


async def test_trace_of_a_passing_script_and_of_a_missing_one(tmp_path):
    sandbox = LocalShellSandbox.create(tmp_path / "repo", {
        "pkg/__init__.py": PKG, "ok.py": "import sys\nsys.path.insert(0, '.')\nimport pkg\n"
                                         "pkg.inner(1)\nsys.exit(0)\n"})
    text = await trace(sandbox, "ok.py")
    assert "<returncode>0</returncode>" in text and "inner  (pkg/__init__.py:5)\n" in text
    text = await trace(sandbox, "/tmp/no-such-script-for-trace.py")
    assert "<returncode>2</returncode>" in text and "calls into" not in text
    assert "/tmp/no-such-script-for-trace.py does not exist. Save the script first" in text
    sandbox.root.joinpath("quiet.py").write_text("x = 1\n")
    text = await trace(sandbox, "quiet.py")
    assert "(none: the script called no function of the repository)" in text


async def test_deep_and_wide_trees_are_cut(tmp_path):
    deep = "def down(n):\n    return 0 if n == 0 else down(n - 1)\n"
    wide = "".join(f"def f{i}():\n    return {i}\n" for i in range(MAX_LINES + 5))
    script = ("import sys\nsys.path.insert(0, '.')\nimport deep, wide\ndeep.down(20)\n"
              f"for i in range({MAX_LINES + 5}):\n    getattr(wide, f'f{{i}}')()\n")
    sandbox = LocalShellSandbox.create(tmp_path / "repo", {
        "deep.py": deep, "wide.py": wide, "run.py": script})
    text = await trace(sandbox, "run.py")
    tree = text.split("--- calls into the repository's code", 1)[1]
    assert f"{'  ' * (MAX_DEPTH - 1)}down  (deep.py:1)\n" in tree
    assert f"{'  ' * MAX_DEPTH}down" not in tree
    assert tree.count("(wide.py:") == MAX_LINES - MAX_DEPTH
    assert f"... {MAX_DEPTH + 5} more call paths" in tree


BUGGY = """\
def parse(text):
    return [clean(w) for w in text.split(",")]


def clean(word):
    word = word.strip()
    if word.startswith("#"):
        return word[2:]
    return word


def join(words):
    return ",".join(words)
"""
BUGGY_TESTS = """\
from pkg import join, parse


def test_parse():
    assert parse("a, b") == ["a", "b"]


def test_join():
    assert join(["a"]) == "a"


def test_roundtrip():
    assert join(parse("x,y")) == "x,y"
"""
BUGGY_REPRO = """\
import sys
sys.path.insert(0, ".")
from pkg import parse
assert parse("#a") == ["a"], parse("#a")
"""


async def trace_with_tests(sandbox, script: str, tests: str) -> str:
    scaffold = ToolScaffold(AgentConfig(scaffold="tools", observation_max_chars=20_000))
    body = json.dumps({"name": "trace", "arguments": {"script": script, "tests": tests}})
    action = parse_tool_call(f"Tracing.\n<tool_call>\n{body}\n</tool_call>")
    return (await scaffold.execute(action, sandbox, 60.0)).text


@pytest.fixture
def python_with_pytest_first(monkeypatch):
    """`python3` in the sandbox's shell is this interpreter (it has pytest)."""
    bin_dir = Path(sys.executable).parent
    if not (bin_dir / "python3").exists():
        pytest.skip("this interpreter has no python3 beside it")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


async def test_suspects_put_the_line_no_passing_test_runs_first(tmp_path, python_with_pytest_first):
    sandbox = LocalShellSandbox.create(tmp_path / "repo", {
        "pkg/__init__.py": BUGGY, "tests/test_pkg.py": BUGGY_TESTS, "repro.py": BUGGY_REPRO})
    text = await trace_with_tests(sandbox, "repro.py", "tests/test_pkg.py")
    assert "<returncode>1</returncode>" in text and "AssertionError: ['']" in text
    suspects = text.split("--- suspects:", 1)[1].splitlines()
    assert "(3 passed, 0 failed)" in suspects[0]
    assert suspects[1:3] == [
        "1. clean  (pkg/__init__.py:5): line 8 ran in 0 of 3 passing tests",
        "2. parse  (pkg/__init__.py:1): line 2 ran in 2 of 3 passing tests",
    ]  # `join` ran in the tests only; the tree above is unchanged
    assert "clean  (pkg/__init__.py:5)" in text.split("--- suspects:", 1)[0]
    assert list(sandbox.root.glob("tmp*")) == []


async def test_suspects_say_why_there_are_none(tmp_path, python_with_pytest_first):
    sandbox = LocalShellSandbox.create(tmp_path / "repo", {
        "pkg/__init__.py": BUGGY, "tests/test_pkg.py": BUGGY_TESTS, "repro.py": BUGGY_REPRO})
    text = await trace_with_tests(sandbox, "repro.py", "tests/no_such_test.py")
    assert "(none: no test ran)" in text and "<returncode>1</returncode>" in text


def test_equal_scores_put_the_function_called_last_first():
    from swefleet.agents.scaffolds.suspects import LineCover, RepoFiles, rank

    cover = LineCover(RepoFiles("/repo"))
    cover.lines = {("a.py", 1): {2}, ("a.py", 5): {6}, ("b.py", 1): {3}}
    counts = {"a.py:2": [0, 0], "a.py:6": [0, 0], "b.py:3": [4, 0]}
    ranked = [key for _, key, _, _ in rank(cover, counts, failing_tests=0)]
    assert ranked == [("a.py", 5), ("a.py", 1), ("b.py", 1)]
    counts["b.py:3"] = [0, 2]  # two failing tests ran it too: most suspect
    assert rank(cover, counts, failing_tests=2)[0][1] == ("b.py", 1)
