"""Rank the functions a script ran by how rarely the passing tests run their lines.

Spectrum-based fault localisation (Ochiai), with the script that reproduces an issue as the one
failing run: a line the script ran scores f / sqrt(F * (f + p)), where f counts the failing runs
that ran it (the script and any failing test), F all failing runs and p the passing tests that
ran it; a function scores as its best line. Equal scores put the function the script called
last first (a reproduction sets things up, then calls the code it is about). This file runs
inside the sandbox beside `call_tree.py` (the `trace` tool's command saves both), so it uses
the standard library only, plus pytest in its `--line-counts` mode, which runs the tests
with a plugin that counts, for each line of the repository's own code, the passing and the
failing tests that ran it, and writes them as JSON.
"""

import json
import math
import os
import re
import subprocess
import sys
import tempfile

SHOWN = 5
"""Suspects printed."""
TESTS_TIMEOUT_S = 40
"""The test run's deadline (the `trace` command's own timeout is longer)."""
_TEST_DIRS = {"tests", "test", "testing"}
CO_OPTIMIZED = 0x1
"""Set on function code objects; module and class bodies lack it (`call_tree.py` uses it too)."""


def repo_relative(root, filename):
    """`filename` relative to `root` when it is the repository's non-test code, else None."""
    if filename.startswith("<"):  # <frozen ...>, <string>, <stdin>
        return None
    path = os.path.realpath(filename)
    if not path.startswith(root + os.sep):
        return None
    rel = os.path.relpath(path, root)
    parts = rel.split(os.sep)
    base = parts[-1]
    if _TEST_DIRS & set(parts[:-1]) or base.startswith("test_") or base.endswith("_test.py"):
        return None
    return None if base == "conftest.py" else rel


class RepoFiles:
    """`repo_relative` under one root, remembered per file name (it is asked on every call)."""

    def __init__(self, root):
        self.root = os.path.realpath(root)
        self.known = {}

    def relative(self, filename):
        if filename not in self.known:
            self.known[filename] = repo_relative(self.root, filename)
        return self.known[filename]


class LineCover:
    """The lines of the repository's functions that ran, per function, and the functions in
    the order first run; calls made under an import are left out when `skip` says so."""

    def __init__(self, files, skip=None):
        self.files = files
        """A `RepoFiles`."""
        self.skip = skip
        self.lines = {}
        """(file, def line) -> set of lines run; dicts keep the order first run."""
        self.names = {}

    def trace(self, frame, event, arg):
        code = frame.f_code
        if not code.co_flags & CO_OPTIMIZED or code.co_name.startswith("<"):
            return None
        rel = self.files.relative(code.co_filename)
        if rel is None or (self.skip is not None and self.skip(frame)):
            return None
        key = (rel, code.co_firstlineno)
        if key not in self.lines:
            self.lines[key] = set()
            self.names[key] = getattr(code, "co_qualname", code.co_name)
        seen = self.lines[key]

        def local(frame, event, arg):
            if event == "line":
                seen.add(frame.f_lineno)
            return local

        return local


def rank(cover, counts, failing_tests):
    """The functions of `cover` (the failing script's run), most suspect first, each as
    (score, key, best line, passing tests that ran that line)."""
    total_failing = 1 + failing_tests
    order = list(cover.lines)
    ranked = []
    for i, key in enumerate(order):
        best = None
        for line in sorted(cover.lines[key]):
            passed, failed = counts.get(f"{key[0]}:{line}", (0, 0))
            score = (1 + failed) / math.sqrt(total_failing * (1 + failed + passed))
            if best is None or score > best[0]:
                best = (score, line, passed)
        if best is not None:
            ranked.append((best[0], i, key, best[1], best[2]))
    ranked.sort(key=lambda r: (-r[0], -r[1]))
    return [(score, key, line, passed) for score, _, key, line, passed in ranked]


def test_counts(tests, root, timeout_s=TESTS_TIMEOUT_S):
    """Run `tests` (pytest arguments) under `--line-counts`: (counts, passed, failed), or a
    string saying why there are none."""
    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, "counts.json")
        try:
            subprocess.run([sys.executable, os.path.abspath(__file__), "--line-counts", out]
                           + list(tests), cwd=root, timeout=timeout_s, check=False,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return f"the tests did not finish within {timeout_s} s"
        if not os.path.isfile(out):
            return "the tests did not run"
        with open(out) as f:
            data = json.load(f)
    if not data["passed"] and not data["failed"]:
        return "no test ran"
    return data["counts"], data["passed"], data["failed"]


def suspects_lines(cover, tests, root):
    """The `trace` tool's suspects section: the header and up to `SHOWN` lines."""
    result = test_counts(tests, root)
    header = "\n--- suspects: the functions it ran, those the passing tests run least first"
    if isinstance(result, str):
        return [f"{header} ---", f"(none: {result})"]
    counts, passed, failed = result
    lines = [f"{header} ({passed} passed, {failed} failed) ---"]
    for n, (score, key, line, ran) in enumerate(rank(cover, counts, failed)[:SHOWN], 1):
        lines.append(f"{n}. {cover.names[key]}  ({key[0]}:{key[1]}): line {line} ran in "
                     f"{ran} of {passed} passing tests")
    if len(lines) == 1:
        lines.append("(none: the script ran no function of the repository)")
    return lines


_SUSPECT = re.compile(r"^\d+\. (\S+)  \((\S+):(\d+)\): line \d+ ran in", re.MULTILINE)


def parse_suspects(text):
    """The suspects a `trace` output lists, in order: (name, file, def line)."""
    return [(name, path, int(line)) for name, path, line in _SUSPECT.findall(text)]


class _CountingPlugin:
    """Per test: the lines it ran (from setup to teardown) and whether it failed."""

    def __init__(self, root):
        self.files = RepoFiles(root)
        """Shared by every test's cover."""
        self.cover = None
        self.failed = False
        self.counts = {}
        self.outcomes = {"passed": 0, "failed": 0}

    def pytest_runtest_logstart(self, nodeid, location):
        self.cover, self.failed = LineCover(self.files), False
        sys.settrace(self.cover.trace)

    def pytest_runtest_logreport(self, report):
        self.failed = self.failed or report.failed

    def pytest_runtest_logfinish(self, nodeid, location):
        sys.settrace(None)
        column = 1 if self.failed else 0
        self.outcomes["failed" if self.failed else "passed"] += 1
        for (rel, _), seen in self.cover.lines.items():
            for line in seen:
                self.counts.setdefault(f"{rel}:{line}", [0, 0])[column] += 1


def _line_counts(out, args):
    import pytest

    sys.path.insert(0, os.getcwd())  # as `python3 -m pytest` has it
    plugin = _CountingPlugin(os.getcwd())
    pytest.main(["-q", "-p", "no:cacheprovider"] + args, plugins=[plugin])
    with open(out, "w") as f:
        json.dump({"counts": plugin.counts, **plugin.outcomes}, f)


if __name__ == "__main__" and sys.argv[1:2] == ["--line-counts"]:
    _line_counts(sys.argv[2], sys.argv[3:])
