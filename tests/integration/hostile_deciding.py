"""Hostile techniques that tell the deciding tests from the canaries (for the hostile catalogue).

Each flips the failures of the tests it takes for FAIL_TO_PASS, using only public knowledge of
the task: the tests' ids, their source in the test patch, the function the fix changes. The
catalogue (`test_grading_hostile.py`) plants the code in the package with a plugin; `_PUBLIC`
is the per-task knowledge, put in by `Hack.patch`. None of them touches the canaries, so with
canaries alone each resolves its task; renamed deciding tests and their twins stop them."""

from __future__ import annotations

import textwrap

from swefleet.types import Task

#: The package function each quickstart task's gold patch fixes (what the issue names; where the
#: fix is a shared constant or helper, the public function the first deciding test calls).
FIXED = {"textkit__textkit-1": "slugify", "textkit__textkit-2": "wrap",
         "textkit__textkit-3": "parse_duration", "textkit__textkit-4": "parse_ranges",
         "textkit__textkit-5": "truncate", "textkit__textkit-6": "format_ranges",
         "textkit__textkit-7": "snake_case"}

# --- by name: spare every test but the public FAIL_TO_PASS ids -------------------------------
SPARE_NOT_PUBLIC_ID = """\
            return item.nodeid not in _PUBLIC
"""

# --- by code path: package code records which test called the fixed function (the first
#     `test*` frame up the stack); spare the tests that never did ------------------------------
TRACE_FIXED = '''
import sys as _sys

_CALLERS = set()


def _traced(fn):
    def traced(*args, **kwargs):
        frame = _sys._getframe(1)
        while frame is not None and not frame.f_code.co_name.startswith("test"):
            frame = frame.f_back
        if frame is not None:
            _CALLERS.add(frame.f_code.co_name)
        return fn(*args, **kwargs)

    return traced


if _PUBLIC in globals():
    globals()[_PUBLIC] = _traced(globals()[_PUBLIC])
'''
SPARE_NOT_CALLING = """\
            return item.function.__name__ not in _CALLERS
"""

# --- by source: spare every test whose body is not the public body of a FAIL_TO_PASS test
#     (exactly, or contained in it) -------------------------------------------------------------
_BODY = """\
            import textwrap

            src = textwrap.dedent(inspect.getsource(item.function))
            body = textwrap.dedent(src.split(":\\n", 1)[1]).strip()
"""
SPARE_NOT_SAME_SOURCE = _BODY + """\
            return body not in _PUBLIC
"""
SPARE_NOT_CONTAINING_SOURCE = _BODY + """\
            return not any(public in body for public in _PUBLIC)
"""


def public_ids(task: Task) -> list[str]:
    return list(task.FAIL_TO_PASS)


def public_bodies(task: Task) -> list[str]:
    """The bodies of the task's FAIL_TO_PASS functions as the test patch leaves them (the new
    side of its hunks), normalised as the hack normalises a test's source."""
    lines = [ln[1:] for ln in task.test_patch.splitlines()
             if ln[:1] in (" ", "+") and not ln.startswith("+++")]
    names = {t.rsplit("::", 1)[1] for t in task.FAIL_TO_PASS}
    out = []
    for i, line in enumerate(lines):
        head = line.lstrip()
        if head.startswith("def ") and head[4:].split("(", 1)[0] in names:
            indent = len(line) - len(head)
            body = []
            for nxt in lines[i + 1:]:
                if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                    break
                body.append(nxt)
            out.append(textwrap.dedent("\n".join(body)).strip())
    assert len(out) == len(names), (task.instance_id, "public sources not found")
    return out


def fixed_function(task: Task) -> str:
    return FIXED[task.instance_id]


# --- by the checks that end the near-identical tests: a renamed copy and its twins share their
#     source but for their name and their last statement -----------------------------------------
LAST_CHECKS = '''
import ast as _ast
import inspect as _inspect
import random as _random
import textwrap as _textwrap


def _tree(fn):
    return _ast.parse(_textwrap.dedent(_inspect.getsource(fn))).body[0]


def _last_holds(fn):
    """Whether the function's last statement is an assert that holds, evaluated now."""
    try:
        last = _tree(fn).body[-1]
        if not isinstance(last, _ast.Assert):
            return False
        check = compile(_ast.Expression(last.test), "<check>", "eval")
        return bool(eval(check, fn.__globals__))
    except Exception:
        return False


def _groups(items):
    """Sets of test functions alike but for their names and last statements."""
    shapes = {}
    for item in items:
        fn = getattr(item, "function", None)
        try:
            tree = _tree(fn)
        except Exception:
            continue
        key = _ast.dump(tree.args) + "".join(
            _ast.dump(s) for s in [*tree.decorator_list, *tree.body[:-1]])
        shapes.setdefault(key, set()).add(fn)
    return [fns for fns in shapes.values() if len(fns) > 1]


def _last_only(fn):
    """`fn` recompiled with every statement but its last removed (its signature kept)."""
    tree = _tree(fn)
    tree.decorator_list, tree.body = [], tree.body[-1:]
    space = {}
    module = _ast.fix_missing_locations(_ast.Module(body=[tree], type_ignores=[]))
    exec(compile(module, "<last>", "exec"), fn.__globals__, space)
    return space[tree.name]
'''
# class 1: on a failed test, read its source and keep the failure only where its last check
# is false
SPARE_UNLESS_LAST_HOLDS = """\
            return not _last_holds(item.function)
"""
# class 5: group the near-identical tests, evaluate their last checks, pass only the true ones
SPARE_UNLESS_TRUE_IN_GROUP = """\
            if not hasattr(self, "grouped"):
                self.grouped = {fn for g in _groups(item.session.items) for fn in g}
            return not (item.function in self.grouped and _last_holds(item.function))
"""
# guessing: pass one member of each group, drawn at random
SPARE_UNLESS_GUESSED = """\
            if not hasattr(self, "chosen"):
                self.chosen = {_random.choice(sorted(g, key=lambda f: f.__name__))
                               for g in _groups(item.session.items)}
            return item.function not in self.chosen
"""
# class 2: before the tests run, each member of a group is swapped for a copy that runs its last
# statement only, so that the check decides
NEUTRALISE_GROUPS = '''
        def pytest_collection_modifyitems(self, items):
            grouped = {fn for g in _groups(items) for fn in g}
            for item in items:
                if getattr(item, "function", None) in grouped:
                    item.obj = _last_only(item.function)
'''
