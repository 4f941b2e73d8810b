"""Hide the tests that decide a task: remove their functions from the base state.

The grader resets every file the test patch touches and applies it, so the removed tests come
back only at grading time (as in SWE-bench): the agent never sees them, and cannot edit them
into passing.
"""

from __future__ import annotations

import ast
import re

from swefleet.envs import safe_ast
from swefleet.envs.canary_ids import node_parts
from swefleet.envs.data.make_quickstart import unified_diff

_PARAMS = re.compile(r"\[.*\]$")


def split_test_id(test_id: str) -> tuple[str, list[str], str]:
    """`path::Class::test_x[p]` -> (`path`, [`Class`], `test_x`)."""
    path, *rest = node_parts(test_id)
    if not rest:
        return path, [], ""
    return path, rest[:-1], _PARAMS.sub("", rest[-1])


def _defs(tree: ast.Module) -> list[tuple[list[str], ast.AST]]:
    """(enclosing class names, function def) for every function of the module."""
    out: list[tuple[list[str], ast.AST]] = []

    def walk(body: list[ast.stmt], classes: list[str]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.append((classes, node))
            elif isinstance(node, ast.ClassDef):
                walk(node.body, [*classes, node.name])

    walk(tree.body, [])
    return out


def locate_test(sources: dict[str, str], test_id: str) -> tuple[str, ast.AST] | None:
    """The file and def of a test: in its own file, else (an inherited test method) in the
    base classes of its class, looked up by name in the test files (its file first)."""
    path, classes, name = split_test_id(test_id)
    if path in sources:
        for owners, node in _defs(safe_ast.parse(sources[path])):
            if node.name == name and owners == classes:
                return path, node
    if not classes:
        return None
    return _inherited(sources, path, classes[-1], name, set())


def _inherited(sources: dict[str, str], first: str, cls: str, name: str,
               seen: set[str]) -> tuple[str, ast.AST] | None:
    """Method `name` of class `cls` or of its bases (depth first, in base order)."""
    if cls in seen:
        return None
    seen.add(cls)
    for path in sorted(sources, key=lambda p: (p != first, p)):
        for node in safe_ast.parse(sources[path]).body:
            if not (isinstance(node, ast.ClassDef) and node.name == cls):
                continue
            for stmt in node.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and stmt.name == name:
                    return path, stmt
            for base in node.bases:
                base_name = getattr(base, "id", None) or getattr(base, "attr", None)
                if base_name and (hit := _inherited(sources, first, base_name, name, seen)):
                    return hit
    return None


def _remove(text: str, nodes: list[ast.AST]) -> str:
    """Delete the lines of `nodes` (with decorators and the blank lines after them); a class
    left without a body gets `pass`."""
    lines = text.splitlines(keepends=True)
    drop: set[int] = set()
    for node in nodes:
        first = min([node.lineno] + [d.lineno for d in node.decorator_list])
        last = node.end_lineno
        while last < len(lines) and not lines[last].strip():
            last += 1
        drop.update(range(first - 1, last))
    kept = [line for i, line in enumerate(lines) if i not in drop]
    out = "".join(kept)
    try:
        safe_ast.parse(out)
        return out
    except SyntaxError:  # an emptied class: keep `pass` where its first removed test was
        pass
    for node in sorted(nodes, key=lambda n: n.lineno):
        indent = lines[node.lineno - 1][: node.col_offset]
        lines[node.lineno - 1] = f"{indent}pass\n"
        drop.discard(node.lineno - 1)
        out = "".join(line for i, line in enumerate(lines) if i not in drop)
        try:
            safe_ast.parse(out)
            return out
        except SyntaxError:
            continue
    raise ValueError("removing the tests leaves a file that does not parse")


def hide_tests(sources: dict[str, str], test_ids: list[str]) -> tuple[dict[str, str], str] | None:
    """Remove the functions of `test_ids` from the test `sources` (path -> text).

    Returns (changed files: path -> text without the tests, test patch that restores them), or
    None when a test cannot be found or a file cannot be diffed safely."""
    targets: dict[str, dict[int, ast.AST]] = {}
    for test_id in test_ids:
        hit = locate_test(sources, test_id)
        if hit is None:
            return None
        path, node = hit
        targets.setdefault(path, {})[node.lineno] = node
    hidden: dict[str, str] = {}
    patch = ""
    for path in sorted(targets):
        original = sources[path]
        if not original.endswith("\n") or "\r" in original:
            return None
        try:
            hidden[path] = _remove(original, list(targets[path].values()))
        except ValueError:
            return None
        patch += unified_diff(path, hidden[path], original)
    return hidden, patch
