"""Parsing and compiling syntax trees from many threads at once (`envs/safe_ast.py`).

The hammer makes threads switch inside a parse (a finalizer that sleeps runs in the middle of
building the tree, as garbage collection does under load): with plain `ast.parse` on CPython
3.11 it soon fails with `SystemError: AST constructor recursion depth mismatch`; through
`safe_ast` never."""

from __future__ import annotations

import ast
import gc
import sys
import threading
import time

import pytest
from swefleet.envs import safe_ast

pytestmark = pytest.mark.unit

SOURCE = "x = " + "[" * 30 + "1" + "]" * 30 + "\n" + "\n".join(
    f"def f{i}(a, b=[1, {{2: 3}}]):\n    return [c for c in b if c]\n" for i in range(20))


class _SwitchThreads:
    """Garbage whose finalizer gives the processor to another thread."""

    def __del__(self):
        time.sleep(0.0002)


def hammer(convert, threads: int = 6, rounds: int = 150) -> list[BaseException]:
    """Run `convert(SOURCE)` `rounds` times in each of `threads` threads with a collection due
    at every allocation; the errors raised (it stops at the first)."""
    errors: list[BaseException] = []
    stop = threading.Event()

    def work():
        for _ in range(rounds):
            if stop.is_set():
                return
            cycle = _SwitchThreads()
            cycle.me = cycle
            del cycle
            try:
                convert(SOURCE)
            except SystemError as e:
                errors.append(e)
                stop.set()

    threshold = gc.get_threshold()
    gc.set_threshold(1, 1000, 1000)  # a young collection at every allocation, old ones rare
    try:
        workers = [threading.Thread(target=work) for _ in range(threads)]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    finally:
        gc.set_threshold(*threshold)
    return errors


def test_parse_and_compile_from_many_threads():
    def parse_then_compile(source: str):
        tree = safe_ast.parse(source)
        safe_ast.compile_tree(tree, "<hammer>")

    assert hammer(parse_then_compile) == []


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="CPython 3.11's bug (gh-106905)")
def test_the_hammer_breaks_plain_ast_parse():
    """Without the lock the same hammer fails: the test above would see it. The race is a race:
    one round of the hammer usually hits it, a busy machine may need a few more."""
    errors: list[BaseException] = []
    for _ in range(10):
        errors = hammer(ast.parse)
        if errors:
            break
    assert errors and "recursion depth mismatch" in str(errors[0])


def test_parse_raises_as_ast_parse():
    with pytest.raises(SyntaxError):
        safe_ast.parse("def (:")
    assert isinstance(safe_ast.parse("1 + 2", mode="eval"), ast.Expression)


def test_the_parsed_codes_syntax_warnings_are_not_printed():
    import warnings

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        safe_ast.parse('pattern = "a\\/b"\n')
        ast.parse('pattern = "a\\/b"\n')  # the plain parse warns: the line above would too
    assert [w.category for w in seen] in ([SyntaxWarning], [DeprecationWarning])  # 3.12 / 3.11


def test_literal_eval_parses_under_the_lock():
    assert safe_ast.literal_eval("  ((1, 'a'), {'k': [2.5]})") == ((1, "a"), {"k": [2.5]})
    with pytest.raises(ValueError):
        safe_ast.literal_eval("f(1)")


def test_grading_and_recording_code_parse_text_only_through_safe_ast():
    """The host's modules that parse text in threads (grading plants canaries and probes in
    worker threads) call `safe_ast`; `call_values.py` runs inside the sandbox, one thread."""
    import re
    from pathlib import Path

    root = Path(safe_ast.__file__).resolve().parent
    direct = re.compile(r"\bast\.(parse|literal_eval)\((?!node\b|expr\b)")
    found = [f"{p.relative_to(root)}:{i}" for p in sorted(root.rglob("*.py"))
             if p.name not in ("safe_ast.py", "call_values.py")
             for i, line in enumerate(p.read_text().splitlines(), 1) if direct.search(line)]
    assert found == []
