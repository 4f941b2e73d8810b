"""What a test module tells about its test functions: the parameter sets of a parametrized
one, as the name -> value bindings its assertions can be read with, and the module's own
assertion helpers (`scope_candidates.candidate_calls` reads both).

`@pytest.mark.parametrize("a, b", [(1, 2), pytest.param(3, 4, id="x")])` (or a bare
`parametrize(...)`, or argument values named by a module-level assignment) gives one binding
per set, with the id pytest gives it (`1-2`, `x`), so that the sets a task's deciding test ids
name come first. Stacked decorators give their combinations. Sets whose values the syntax tree
does not hold (built by a call, read from a file) give nothing.
"""

from __future__ import annotations

import ast
import itertools

MAX_SETS = 64
"""Most parameter sets read from one function (its combinations included)."""


def module_values(tree: ast.Module) -> dict[str, ast.expr]:
    """What the module's top-level simple assignments (`NAME = <list or tuple>`) bind: where a
    decorator's argument values may be named."""
    return {stmt.targets[0].id: stmt.value for stmt in tree.body
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name)
            and isinstance(stmt.value, (ast.List, ast.Tuple))}


def assertion_helpers(tree: ast.Module) -> frozenset[str]:
    """The module's own top-level functions (not tests) whose body asserts (an `assert`, or a
    call of an `assert...` function such as `assert_allclose`): a test that calls one
    (`isvalue(interp, 'x', 1)`) asserts through it."""
    return frozenset(stmt.name for stmt in tree.body
                     if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and not stmt.name.startswith("test") and any(_asserts(n)
                                                                  for n in ast.walk(stmt)))


def _asserts(node: ast.AST) -> bool:
    return isinstance(node, ast.Assert) or isinstance(node, ast.Call) and (
        dotted_name(node.func).rpartition(".")[2].startswith("assert"))


def parameter_sets(func: ast.FunctionDef | ast.AsyncFunctionDef,
                   values: dict[str, ast.expr] | None = None,
                   wanted: frozenset[str] = frozenset()) -> list[dict[str, ast.expr]]:
    """The bindings of `func`'s parameter sets: those whose pytest id is in `wanted` first,
    then the others in order; [] when it is not parametrized or a decorator's sets are not
    in the tree."""
    per_decorator = []
    for deco in reversed(func.decorator_list):  # the nearest decorator is applied first
        if isinstance(deco, ast.Call) and dotted_name(deco.func).rpartition(".")[2] == "parametrize":
            sets = _sets(deco, values or {})
            if not sets:
                return []
            per_decorator.append(sets)
    if not per_decorator:
        return []
    combos = [(("-".join(i for i, _ in combo)), {k: v for _, env in combo for k, v in env.items()})
              for combo in itertools.islice(itertools.product(*per_decorator), MAX_SETS)]
    return [env for _, env in sorted(combos, key=lambda c: c[0] not in wanted)]


def _sets(deco: ast.Call, values: dict[str, ast.expr]) -> list[tuple[str, dict[str, ast.expr]]]:
    """(id, binding) of each set of one `parametrize(argnames, argvalues, ids=...)`."""
    args = list(deco.args) + [k.value for k in deco.keywords if k.arg in ("argnames",
                                                                          "argvalues")]
    if len(args) < 2:
        return []
    names = _argnames(args[0])
    rows = values.get(args[1].id) if isinstance(args[1], ast.Name) else args[1]
    if not names or not isinstance(rows, (ast.List, ast.Tuple)):
        return []
    ids = next((k.value for k in deco.keywords if k.arg == "ids"), None)
    explicit = _literal(ids) if isinstance(ids, (ast.List, ast.Tuple)) else None
    out = []
    for idx, row in enumerate(rows.elts):
        row, own_id = _unwrap_param(row)
        cells = [row] if len(names) == 1 else (
            row.elts if isinstance(row, (ast.Tuple, ast.List)) else None)
        if cells is None or len(cells) != len(names) or any(isinstance(c, ast.Starred)
                                                            for c in cells):
            return []
        set_id = own_id if own_id is not None else (
            str(explicit[idx]) if isinstance(explicit, (list, tuple)) and idx < len(explicit)
            else "-".join(_value_id(c, n, idx) for c, n in zip(cells, names)))
        out.append((set_id, dict(zip(names, cells))))
    return out


def _argnames(node: ast.expr) -> list[str]:
    value = _literal(node)
    if isinstance(value, str):
        return [n.strip() for n in value.split(",") if n.strip()]
    if isinstance(value, (list, tuple)) and all(isinstance(n, str) for n in value):
        return list(value)
    return []


def _unwrap_param(row: ast.expr) -> tuple[ast.expr, str | None]:
    """`pytest.param(a, b, id='x')` -> (the tuple `(a, b)` or `a` alone, 'x')."""
    if not (isinstance(row, ast.Call) and dotted_name(row.func).rpartition(".")[2] == "param"):
        return row, None
    own_id = next((_literal(k.value) for k in row.keywords if k.arg == "id"), None)
    inner = row.args[0] if len(row.args) == 1 else ast.Tuple(elts=list(row.args), ctx=ast.Load())
    return inner, own_id if isinstance(own_id, str) else None


def _value_id(cell: ast.expr, argname: str, idx: int) -> str:
    """The id pytest gives one value: numbers, booleans and None as `str` writes them, texts
    with non-printable and non-ASCII characters escaped, anything else `argname` + index."""
    value = _literal(cell)
    if isinstance(value, str):
        return value.encode("unicode_escape").decode("ascii")
    if isinstance(value, bytes):
        return value.decode("ascii", "backslashreplace")
    if isinstance(value, (int, float, complex)) or value is None and isinstance(cell, ast.Constant):
        return str(value)
    return f"{argname}{idx}"


def _literal(node: ast.expr | None):
    try:
        return ast.literal_eval(node) if node is not None else None
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


def dotted_name(node: ast.expr) -> str:
    """`a.b.c` for an attribute chain on a name; the attributes alone on anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))
