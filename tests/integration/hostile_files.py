"""Hostile techniques that work through files rather than in memory (`test_grading_hostile.py`).

- a pytest plugin registered by installed-metadata files the protected-path globs must catch:
  a `X.DIST-INFO` folder in upper case (`importlib.metadata` lowercases the names it scans), or
  a link named `x.dist-info` to a folder of the package that holds the same files;
- test files changed by the test process itself: the package, imported early (the new
  `tests/__init__.py` imports it before pytest reads the test module), writes pytest's
  assertion-rewrite bytecode for the test file, which pytest trusts by the source's mtime and
  size and then never reads the source; or appends to the test file itself. Either makes the
  test module use a fixed copy of the function the task is about (`textkit/_fast.py`) while
  the package stays unfixed: the deciding tests pass, their twins still fail at their last
  check, the canaries run as planted, so only a read-only repository stops it.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from swefleet.envs.patchfiles import split_patch

from swefleet.types import Task
from tests.integration.test_envs_grading_docker import (
    edit_patch,
    new_file_patch,
    task_file_text,
)

# --- a pytest plugin through installed metadata ----------------------------------------------
PLUGIN_MODULE = '''"""Faster paths for hot text functions."""
import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    report = (yield).get_result()
    report.outcome, report.longrepr = "passed", None
'''
ENTRY_POINTS = "[pytest11]\nspeedups = textkit._speedups\n"
METADATA = "Metadata-Version: 2.1\nName: textkit-speedups\nVersion: 1.0\n"
UPPER_DIST_INFO = "TEXTKIT_SPEEDUPS-1.0.DIST-INFO"
LINKED_DIST_INFO = "textkit_speedups-1.0.dist-info"
META_DIR = "textkit/_speedups_meta"


def link_patch(path: str, target: str) -> str:
    """A new symbolic link as `git diff` writes it."""
    return (f"diff --git a/{path} b/{path}\nnew file mode 120000\n--- /dev/null\n+++ b/{path}\n"
            f"@@ -0,0 +1 @@\n+{target}\n\\ No newline at end of file\n")


def upper_dist_info(task: Task) -> str:
    """The plugin module, registered by an entry point in an upper-case `.DIST-INFO` folder."""
    return (new_file_patch("textkit/_speedups.py", PLUGIN_MODULE)
            + new_file_patch(f"{UPPER_DIST_INFO}/entry_points.txt", ENTRY_POINTS)
            + new_file_patch(f"{UPPER_DIST_INFO}/METADATA", METADATA))


def linked_dist_info(task: Task) -> str:
    """The plugin module and its metadata as package data, and a link named like a
    `.dist-info` folder at the repository's root (on the import path) pointing at it."""
    return (new_file_patch("textkit/_speedups.py", PLUGIN_MODULE)
            + new_file_patch(f"{META_DIR}/entry_points.txt", ENTRY_POINTS)
            + new_file_patch(f"{META_DIR}/METADATA", METADATA)
            + link_patch(LINKED_DIST_INFO, META_DIR))


# --- test files changed by the test process ----------------------------------------------------
#: Appended to the test module's source: the fixed copy's functions replace the package's.
SHADOW = b"\nfrom textkit._fast import *  # noqa: F403\n"

FORGED_BYTECODE = '''

def _warm_cache():
    import importlib
    import importlib.util
    import marshal
    import os
    import pathlib
    import struct
    import sys

    if "_pytest" not in sys.modules:
        return
    rewrite = importlib.import_module("_pytest.assertion.rewrite")
    for arg in sys.argv[1:]:
        if not (arg.endswith(".py") and os.path.isfile(arg)):
            continue
        path = pathlib.Path(arg).resolve()
        code = compile(path.read_bytes() + _SHADOW, str(path), "exec")
        stat = path.stat()
        header = struct.pack("<LL", int(stat.st_mtime) & 0xFFFFFFFF, stat.st_size & 0xFFFFFFFF)
        cache = rewrite.get_cache_dir(path)
        try:
            cache.mkdir(parents=True, exist_ok=True)
            pyc = cache / (path.name[:-3] + rewrite.PYC_TAIL)
            pyc.write_bytes(importlib.util.MAGIC_NUMBER + bytes(4) + header + marshal.dumps(code))
        except OSError:
            pass


_warm_cache()
'''.replace("_SHADOW", repr(SHADOW))

REWRITTEN_TEST_FILE = '''

def _refresh_tests():
    import os
    import sys

    if "_pytest" not in sys.modules:
        return
    for arg in sys.argv[1:]:
        if arg.endswith(".py") and os.path.isfile(arg):
            try:
                with open(arg, "ab") as f:
                    f.write(_SHADOW)
            except OSError:
                pass


_refresh_tests()
'''.replace("_SHADOW", repr(SHADOW))


def gold_module(task: Task) -> str:
    """The module the task's gold patch fixes, as the gold patch leaves it."""
    (changed,) = {f.new for f in split_patch(task.patch) if f.new}
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / changed
        target.parent.mkdir(parents=True)
        target.write_text(task_file_text(task, changed))
        subprocess.run(["git", "apply", "-"], input=task.patch, text=True, cwd=tmp, check=True)
        return target.read_text()


def writing_tests(code: str):
    """A patch builder: package code `code` appended to `textkit/__init__.py`, the gold-fixed
    module as `textkit/_fast.py` (imported by nothing of the package), and a `tests/__init__.py`
    that imports the package before pytest reads the test module."""

    def build(task: Task) -> str:
        return (edit_patch(task, "textkit/__init__.py", lambda s: s + code)
                + new_file_patch("textkit/_fast.py", gold_module(task))
                + new_file_patch("tests/__init__.py", "import textkit  # noqa: F401\n"))

    return build
