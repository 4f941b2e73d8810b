"""Python's `ast` from several threads at once: parsing and compiling under one lock.

CPython 3.11 converts between its C syntax tree and the `ast` module's Python objects with a
recursion counter kept per interpreter, not per thread (gh-106905). Two threads that parse (or
compile a tree) at the same time corrupt it, and one of them fails with `SystemError: AST
constructor recursion depth mismatch`. Grading runs in threads and plants canaries
(`envs/canary.py`), reads flags (`envs/tamper.py`), task synthesis parses in worker threads:
every conversion goes through this module, which holds `AST_LOCK` for it.

Walking, dumping and unparsing a tree (`ast.walk`, `ast.dump`, `ast.unparse`, node visitors)
are plain Python over objects already built and need no lock.
"""

from __future__ import annotations

import ast
import threading
import warnings

AST_LOCK = threading.RLock()
"""Held while a source text becomes a tree or a tree becomes code."""


def parse(source: str | bytes, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    """`ast.parse(source, filename, mode)`, one thread at a time (raises as `ast.parse`). The
    code parsed is a task's or an agent's, not swefleet's: its warnings (an invalid escape such
    as `"\\/"`: a `DeprecationWarning` on 3.11, a `SyntaxWarning` since) are not printed into
    swefleet's log."""
    with AST_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        return ast.parse(source, filename, mode)


def compile_tree(tree: ast.AST, filename: str = "<ast>", mode: str = "exec"):
    """`compile(tree, filename, mode)`: a code object from a tree, one thread at a time."""
    with AST_LOCK:
        return compile(tree, filename, mode)


def literal_eval(text: str):
    """`ast.literal_eval(text)`: the text parsed under the lock, its tree evaluated outside it
    (raises as `ast.literal_eval`)."""
    return ast.literal_eval(parse(text.lstrip(" \t"), mode="eval"))
