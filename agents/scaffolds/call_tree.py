"""Run a Python script and print the tree of the repository's functions it called.

This file runs inside the sandbox (its source is fed to `python3 -`), so it uses the standard
library only and works on Python 3.8 and later. `python3 - SCRIPT [ARGS...]` runs SCRIPT as
`python3 SCRIPT` would from the current directory (the repository root), lets its output through,
prints its traceback if it raised, and then the calls into the repository's own code: one line per
distinct call path, in the order first called, indented by depth, with the file, the `def` line
and how many times that path ran. Test files, module and class bodies, calls made while a module
is imported, comprehensions and lambdas are left out; the tree stops at `MAX_DEPTH` levels and
`MAX_LINES` lines. The exit code is the script's (2, with a line saying how to save it, when there
is no such file).

It is how the `trace` tool of the tools scaffold finds the code behind a wrong result: the buggy
function is among the calls whenever the reproduction calls it after its imports.
"""

import os
import runpy
import sys
import traceback

MAX_DEPTH = 8
"""Deeper calls are not shown (their callers are)."""
MAX_LINES = 60
"""Lines of the tree shown; the rest are counted."""
_TEST_DIRS = {"tests", "test", "testing"}
_CO_OPTIMIZED = 0x1
"""Set on function code objects; module and class bodies lack it."""


class CallTree:
    """Distinct call paths into the repository's code, counted, in the order first seen."""

    def __init__(self, root):
        self.root = os.path.realpath(root)
        self.files = {}
        self.nodes = {}
        """(parent key, file, def line, name) -> [calls, depth]; dicts keep insertion order."""
        self.stack = []
        """(frame, key) of the repository functions now running."""

    def relative(self, filename):
        """`filename` relative to the root when it is the repository's non-test code, else None."""
        if filename not in self.files:
            self.files[filename] = self._relative(filename)
        return self.files[filename]

    def _relative(self, filename):
        if filename.startswith("<"):  # <frozen ...>, <string>, <stdin>
            return None
        path = os.path.realpath(filename)
        if not path.startswith(self.root + os.sep):
            return None
        rel = os.path.relpath(path, self.root)
        parts = rel.split(os.sep)
        base = parts[-1]
        if _TEST_DIRS & set(parts[:-1]) or base.startswith("test_") or base.endswith("_test.py"):
            return None
        return None if base == "conftest.py" else rel

    def profile(self, frame, event, arg):
        if event == "call":
            self._call(frame)
        elif event == "return" and self.stack and self.stack[-1][0] is frame:
            self.stack.pop()

    def _call(self, frame):
        code = frame.f_code
        if not code.co_flags & _CO_OPTIMIZED or code.co_name.startswith("<"):
            return  # a module or class body, a comprehension, a lambda
        rel = self.relative(code.co_filename)
        if rel is None or (not self.stack and _importing(frame)):
            return
        name = getattr(code, "co_qualname", code.co_name)
        parent = self.stack[-1][1] if self.stack else None
        key = (parent, rel, code.co_firstlineno, name)
        node = self.nodes.get(key)
        if node is None:
            depth = self.nodes[parent][1] + 1 if parent is not None else 0
            node = self.nodes[key] = [0, depth]
        node[0] += 1
        self.stack.append((frame, key))

    def lines(self):
        shown = [(key, node) for key, node in self.nodes.items() if node[1] < MAX_DEPTH]
        out = []
        for (_, rel, line, name), (calls, depth) in shown[:MAX_LINES]:
            times = f" x{calls}" if calls > 1 else ""
            out.append(f"{'  ' * depth}{name}  ({rel}:{line}){times}")
        if len(shown) > MAX_LINES:
            out.append(f"... {len(shown) - MAX_LINES} more call paths")
        return out


def _importing(frame):
    """True when `frame` runs under an import (a decorator or a call at module level)."""
    frame = frame.f_back
    while frame is not None:
        if frame.f_code.co_filename.startswith("<frozen importlib"):
            return True
        frame = frame.f_back
    return False


def main(argv):
    if not argv:
        sys.stderr.write("usage: python3 - SCRIPT [ARGS...]\n")
        return 2
    if not os.path.isfile(argv[0]):
        print(f"{argv[0]} does not exist. Save the script first (with bash: cat > {argv[0]} "
              "<<'EOF' ... EOF), then trace it.")
        return 2
    tree = CallTree(os.getcwd())
    sys.argv = list(argv)
    script = os.path.abspath(argv[0])
    sys.path[0] = os.path.dirname(script)  # as `python3 SCRIPT` has it
    code = 0
    sys.setprofile(tree.profile)
    try:
        runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException as exc:  # noqa: BLE001 (the script's own failure: shown, then the calls)
        sys.setprofile(None)
        tb = exc.__traceback__
        while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != script:
            tb = tb.tb_next  # this file's and runpy's frames
        traceback.print_exception(type(exc), exc, tb or exc.__traceback__)
        code = 1
    finally:
        sys.setprofile(None)
    sys.stdout.flush()
    sys.stderr.flush()
    lines = tree.lines()
    print("\n--- calls into the repository's code (call order; xN: that call path ran N times) ---")
    print("\n".join(lines) if lines else "(none: the script called no function of the repository)")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
