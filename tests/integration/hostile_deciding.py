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
