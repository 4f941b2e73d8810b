"""What the Python code a patch adds names, read from its syntax tree (no Docker).

`runner_flags` (`envs/tamper.py`) matches the names of test-runner internals against the code
a model patch adds. Read as text, `modules.get("_py" + "test.reports")` or
`getattr(_sys, "ex" + "it")` names nothing; read from the tree it names `_pytest.reports` and
`sys.exit`. `names_in` gives, for each added block that parses, its dotted names with import
aliases undone (`import sys as _s; _s.exit` -> `sys.exit`), its string constants with
concatenations folded (`+`, implicit, f-strings' constant parts, `"".join([...])`,
`chr(95)`), and `getattr(x, "name")` as `x.name`. A block that does not parse is read line by
line. Names built from data the tree does not hold (read from a file, decoded from bytes,
computed in a loop) are not found: the flags are a review aid; canaries are the defence.
"""

from __future__ import annotations

import ast
import textwrap

from swefleet.envs import safe_ast


def names_in(added_blocks: list[str]) -> list[str]:
    """Names and folded string constants of the code in `added_blocks` (runs of added lines)."""
    out: list[str] = []
    for block in added_blocks:
        for tree in _trees(block):
            out += _Names(tree).found
    return list(dict.fromkeys(out))


def _trees(block: str) -> list[ast.AST]:
    try:
        return [safe_ast.parse(textwrap.dedent(block))]
    except (SyntaxError, ValueError):
        pass
    trees = []
    for line in block.split("\n"):
        try:
            trees.append(safe_ast.parse(line.strip()))
        except (SyntaxError, ValueError):
            continue
    return trees


class _Names:
    """One walk over a tree: import aliases first, then names and constants."""

    def __init__(self, tree: ast.AST) -> None:
        self.aliases: dict[str, str] = {}
        nodes = list(ast.walk(tree))
        for node in nodes:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                self._alias(node)
        self.found: list[str] = []
        for node in nodes:
            self._read(node)

    def _alias(self, node: ast.Import | ast.ImportFrom) -> None:
        base = f"{node.module}." if isinstance(node, ast.ImportFrom) and node.module else ""
        for a in node.names:
            if a.asname:
                self.aliases[a.asname] = base + a.name
            elif base:
                self.aliases[a.name] = base + a.name

    def _read(self, node: ast.AST) -> None:
        if isinstance(node, (ast.Attribute, ast.Name)):
            if (chain := self._chain(node)) is not None:
                self.found.append(chain)
        elif isinstance(node, ast.Call) and _called(node) == "getattr" and len(node.args) >= 2:
            base, attr = self._chain(node.args[0]), _folded(node.args[1])
            if base is not None and attr is not None:
                self.found.append(f"{base}.{attr}")
        folds = isinstance(node, (ast.BinOp, ast.JoinedStr, ast.Call, ast.Constant))
        if folds and (text := _folded(node)):
            self.found.append(text)

    def _chain(self, node: ast.AST) -> str | None:
        """`a.b.c` of a Name/Attribute chain, its first name's import alias undone."""
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        parts.append(self.aliases.get(node.id, node.id))
        return ".".join(reversed(parts))


def _called(node: ast.Call) -> str:
    return node.func.id if isinstance(node.func, ast.Name) else ""


def _folded(node: ast.AST) -> str | None:
    """The string `node` always evaluates to, when the tree holds it; else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _folded(node.left), _folded(node.right)
        return left + right if left is not None and right is not None else None
    if isinstance(node, ast.JoinedStr):
        return "".join(_folded(v) or "" for v in node.values)
    if isinstance(node, ast.Call):
        return _folded_call(node)
    return None


def _folded_call(node: ast.Call) -> str | None:
    """`chr(95)`, `"sep".join([...])` of strings that fold."""
    if _called(node) == "chr" and len(node.args) == 1:
        arg = node.args[0]
        if isinstance(arg, ast.Constant) and isinstance(arg.value, int) and 0 <= arg.value < 0x110000:
            return chr(arg.value)
        return None
    func = node.func
    if (isinstance(func, ast.Attribute) and func.attr == "join" and len(node.args) == 1
            and (sep := _folded(func.value)) is not None
            and isinstance(node.args[0], (ast.List, ast.Tuple))):
        parts = [_folded(e) for e in node.args[0].elts]
        return None if any(p is None for p in parts) else sep.join(parts)
    return None
