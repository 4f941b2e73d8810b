"""Run a Python script and print the tree of the repository's functions it called.

This file runs inside the sandbox (the `trace` tool's command saves it beside `suspects.py`), so
it uses the standard library only and works on Python 3.8 and later. `python3 call_tree.py
[--tests 'PYTEST ARGS'] SCRIPT [ARGS...]` runs SCRIPT as
`python3 SCRIPT` would from the current directory (the repository root), lets its output through,
prints its traceback if it raised, and then the calls into the repository's own code: one line per
distinct call path, in the order first called, indented by depth, with the file, the `def` line
and how many times that path ran. Test files, module and class bodies, calls made while a module
is imported, comprehensions and lambdas are left out; the tree stops at `MAX_DEPTH` levels and
`MAX_LINES` lines. With `--tests`, the suspects follow: the functions the script ran, ranked
against those tests' line counts (`suspects.py`). The exit code is the script's (2, with a line
saying how to save it, when there is no such file).

It is how the `trace` tool of the tools scaffold finds the code behind a wrong result: the buggy
function is among the calls whenever the reproduction calls it after its imports.
"""

import os
import runpy
import shlex
import sys
import traceback

try:
    from suspects import CO_OPTIMIZED, LineCover, RepoFiles, suspects_lines  # beside this file
except ImportError:  # imported as part of swefleet
    from swefleet.agents.scaffolds.suspects import (
        CO_OPTIMIZED,
        LineCover,
        RepoFiles,
        suspects_lines,
    )

MAX_DEPTH = 8
"""Deeper calls are not shown (their callers are)."""
MAX_LINES = 60
"""Lines of the tree shown; the rest are counted."""


class CallTree:
    """Distinct call paths into the repository's code, counted, in the order first seen."""

    def __init__(self, files):
        self.files = files
        """A `RepoFiles`: which code is the repository's."""
        self.nodes = {}
        """(parent key, file, def line, name) -> [calls, depth]; dicts keep insertion order."""
        self.stack = []
        """(frame, key) of the repository functions now running."""

    def profile(self, frame, event, arg):
        if event == "call":
            self._call(frame)
        elif event == "return" and self.stack and self.stack[-1][0] is frame:
            self.stack.pop()

    def _call(self, frame):
        code = frame.f_code
        if not code.co_flags & CO_OPTIMIZED or code.co_name.startswith("<"):
            return  # a module or class body, a comprehension, a lambda
        rel = self.files.relative(code.co_filename)
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
    tests = None
    if argv[:1] == ["--tests"] and len(argv) > 1:
        tests, argv = ["-o", "addopts="] + shlex.split(argv[1]), argv[2:]
    if not argv:
        sys.stderr.write("usage: call_tree.py [--tests 'PYTEST ARGS'] SCRIPT [ARGS...]\n")
        return 2
    if not os.path.isfile(argv[0]):
        print(f"{argv[0]} does not exist. Save the script first (with bash: cat > {argv[0]} "
              "<<'EOF' ... EOF), then trace it.")
        return 2
    files = RepoFiles(os.getcwd())
    tree = CallTree(files)
    sys.argv = list(argv)
    script = os.path.abspath(argv[0])
    sys.path[0] = os.path.dirname(script)  # as `python3 SCRIPT` has it
    code = 0
    cover = LineCover(files, skip=_importing)
    sys.setprofile(tree.profile)
    if tests is not None:
        sys.settrace(cover.trace)
    try:
        runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    except BaseException as exc:  # noqa: BLE001 (the script's own failure: shown, then the calls)
        sys.setprofile(None)
        sys.settrace(None)
        tb = exc.__traceback__
        while tb is not None and os.path.abspath(tb.tb_frame.f_code.co_filename) != script:
            tb = tb.tb_next  # this file's and runpy's frames
        traceback.print_exception(type(exc), exc, tb or exc.__traceback__)
        code = 1
    finally:
        sys.setprofile(None)
        sys.settrace(None)
    sys.stdout.flush()
    sys.stderr.flush()
    lines = tree.lines()
    print("\n--- calls into the repository's code (call order; xN: that call path ran N times) ---")
    print("\n".join(lines) if lines else "(none: the script called no function of the repository)")
    if tests is not None:
        print("\n".join(suspects_lines(cover, tests, files.root)))
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
