"""Behaviour probes in a deciding test's own scope: calls on the objects the test built.

The standalone probes (`behaviour_run.py`) replay calls whose arguments and objects are plain
literals; a test that builds its object from another object, a function or a storage class
has none. Its own scope has them, at the end of its body: a call the test's assertions make
(`cache.get(3)`, `parse(sql)[0].value`), evaluated again after the body, with one literal
argument nudged (`cache.get(4)`) so that its value is not the one the assertion spells out.

`recording_file` writes, for each candidate call of each deciding function (and, once a gold
run has shown which of them give a value, for the tuple of those: `combined`), a copy of the
function (`test_sfrec_<n>`, same decorators and fixtures) in which every assertion is kept but
cannot fail (its expression still runs, in order) and whose last statements record the
`repr` of the candidate, or null when it raised. That file runs in the task's sandbox with the
gold code (twice, two hash seeds), the base code and each mutant (`behaviour_run.py`);
`candidates_for_pick` turns the values into the candidates `behaviour.pick` chooses from
(the twins' values: what mutants return, else the gold value nudged, `decoys`). The
chosen check is appended to the copy (and the twins) of the real test when grading
(`ProbeCall.scope`): the same body runs before it, with its assertions real.
"""

from __future__ import annotations

import ast
import builtins
import copy
import inspect
import json
import re

from swefleet.envs import safe_ast
from swefleet.envs.canary_twins import find_function
from swefleet.envs.synth.call_values import ADDRESS, MAX_REPR, fixed_hash, hash_ordered

REC_PREFIX = "test_sfrec_"
"""Name prefix of the recording copies (selected with `-k sfrec`)."""
MAX_PER_FUNCTION = 10
"""Candidate expressions recorded per deciding test function."""
MAX_INLINED = 2000
"""Longest value (source characters) a local name is replaced by in a candidate."""
_LEADING_ZERO = re.compile(r"(?<![\w.])0\d")
_BUILTINS = frozenset(dir(builtins))
_WORD = re.compile(r"(?<![A-Za-z])[A-Za-z]{4,}(?![A-Za-z])")
_SEPARATOR = re.compile(r"[\s.,;:()\[\]{}<>=*#|/-]")
_WRAPPERS = {"len", "list", "tuple", "sorted", "set", "frozenset", "dict", "str", "repr",
             "bool", "int", "float", "type", "isinstance", "next", "iter", "print", "any", "all"}


def candidate_calls(func: ast.FunctionDef | ast.AsyncFunctionDef) -> list[str]:
    """Source texts of the expressions to evaluate at the end of `func`: the outermost calls
    inside its assertions (`assert X == Y`, `self.assertEqual(X, Y)`) that are not builtins or
    pytest's, and the sides of its comparisons that reach a call (`parse(sql)[0].value`), each
    with one literal in a call's arguments nudged (`_nudged`; inside list, tuple and dict
    displays too); then the same of the assertions with the local names that simple
    assignments before them bound replaced by what was assigned (`s = 'a b'; assert f(s) == x`
    gives `f('a c')`, `_inlined_assertions`); at most `MAX_PER_FUNCTION`, no repeats. Never an
    expression as the test writes it, names replaced or not: the test's own assertion would
    say what it returns, and so which check contradicts it."""
    found: list[ast.expr] = []
    for node in ast.walk(func):
        if isinstance(node, ast.Assert):
            found += _outer_calls(node.test) + _operands(node.test)
        elif isinstance(node, ast.Call) and _is_unittest_assert(node):
            for arg in node.args:
                found += _outer_calls(arg) + _operands(arg)
    inlined = [x for e in _inlined_assertions(func.body, {}) for x in _outer_calls(e) + _operands(e)]
    written = {ast.unparse(expr) for expr in found + inlined}
    nudged = [ast.unparse(v) for expr in found + inlined if _names_code(expr)
              for v in _nudged_variants(expr)]
    return [text for text in dict.fromkeys(nudged) if text not in written][:MAX_PER_FUNCTION]


def _names_code(expr: ast.expr) -> bool:
    """Whether `expr` names anything but builtins (`'-'.join(['a', 'b'])` computes a value
    that no code under test changes)."""
    return any(isinstance(n, ast.Name) and n.id not in _BUILTINS for n in ast.walk(expr))


def _inlined_assertions(body: list[ast.stmt], env: dict[str, ast.expr]) -> list[ast.expr]:
    """The asserted expressions of `body` (an `assert`'s test, a unittest assertion's
    arguments) in source order, each with the names that `env` and the simple assignments
    (`name = <expression without a lambda or comprehension>`) before it bound replaced by
    their values; a name bound any other way (a loop, a `with`, a tuple, `+=`), or one whose
    value is not a literal and whose object a statement may change (`_changed_names`), is
    left as is from there on. A block inside sees the names
    bound before it that it does not bind."""
    env = dict(env)
    out: list[ast.expr] = []
    for stmt in body:
        if isinstance(stmt, ast.Assert):
            out.append(_inline(stmt.test, env))
        elif (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
              and _is_unittest_assert(stmt.value)):
            out += [_inline(arg, env) for arg in stmt.value.args]
        for name in _changed_names(stmt) & env.keys():  # a new object would not have the
            if not _is_literal(env[name]):                # state the test gave this one
                env.pop(name)
        for name in _bound_names(stmt):  # (a loop's names vary from one pass to the next)
            env.pop(name, None)
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(stmt, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    out += _inlined_assertions(inner, env)
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name) and not _has_scoped_names(stmt.value)):
            value = _inline(stmt.value, env)
            if len(ast.unparse(value)) <= MAX_INLINED:
                env[stmt.targets[0].id] = value
    return out


def _bound_names(stmt: ast.stmt) -> set[str]:
    """The names `stmt` binds or deletes anywhere in it (a nested function or class: its name)."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    return {n.id for n in ast.walk(stmt)
            if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del))}


def _changed_names(stmt: ast.stmt) -> set[str]:
    """Names whose object `stmt` may change: every name of a statement that is a bare
    expression (`s.put(1)`, `fill(s)`), and the name under a target's attribute or index
    (`s.x = 1`, `s[k] += 1`, `del s[k]`)."""
    if isinstance(stmt, ast.Expr):
        return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)}
    targets = [t for n in ast.walk(stmt) if isinstance(n, (ast.Assign, ast.AugAssign,
                                                           ast.AnnAssign, ast.Delete))
               for t in (n.targets if isinstance(n, (ast.Assign, ast.Delete)) else [n.target])]
    out = set()
    for target in targets:
        while isinstance(target, (ast.Attribute, ast.Subscript)):
            target = target.value
            if isinstance(target, ast.Name):
                out.add(target.id)
    return out


def _is_literal(expr: ast.expr) -> bool:
    try:
        ast.literal_eval(expr)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return False
    return True


class _Inliner(ast.NodeTransformer):
    def __init__(self, env: dict[str, ast.expr]) -> None:
        self.env = env

    def visit_Name(self, node: ast.Name):
        if isinstance(node.ctx, ast.Load) and node.id in self.env:
            return copy.deepcopy(self.env[node.id])
        return node

    def visit_JoinedStr(self, node: ast.JoinedStr):  # (3.11 cannot write every value back
        return node                                  # into an f-string's braces)


def _inline(expr: ast.expr, env: dict[str, ast.expr]) -> ast.expr:
    """A copy of `expr` with the names of `env` replaced by their values."""
    return _Inliner(env).visit(copy.deepcopy(expr)) if env else expr


def _nudged_variants(expr: ast.expr) -> list[ast.expr]:
    """Copies of `expr` with one literal of a call's arguments nudged (`_nudged`)."""
    literals = {id(node) for node in _argument_literals(expr)}
    nodes = list(ast.walk(expr))
    out = []
    for i in [i for i, node in enumerate(nodes) if id(node) in literals]:
        for value in _nudged(nodes[i]):
            new = copy.deepcopy(expr)
            target = list(ast.walk(new))[i]
            target.value = value
            out.append(new)
    return out


def _argument_literals(expr: ast.expr) -> list[ast.Constant]:
    """The constants in the arguments of the calls of `expr`, inside literal displays too."""
    out: list[ast.Constant] = []

    def collect(node: ast.AST) -> None:
        if isinstance(node, ast.Constant):
            out.append(node)
        elif isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
            for child in ast.iter_child_nodes(node):
                collect(child)

    for node in ast.walk(expr):
        if isinstance(node, ast.Call):
            for arg in [*node.args, *(k.value for k in node.keywords)]:
                collect(arg)
    return out


def _operands(expr: ast.AST) -> list[ast.expr]:
    """The sides of a comparison that reach a call through an index or an attribute
    (`parse(sql)[0].value`): a value the call alone may not show in its `repr`."""
    if not isinstance(expr, ast.Compare):
        return [] if isinstance(expr, ast.Call) else [
            x for child in ast.iter_child_nodes(expr) for x in _operands(child)]
    sides = [expr.left, *expr.comparators]
    while any(isinstance(x, ast.Call) and _called_name(x) in _WRAPPERS for x in sides):
        sides = [a for x in sides for a in (
            x.args if isinstance(x, ast.Call) and _called_name(x) in _WRAPPERS else [x])]
    return [x for x in sides if isinstance(x, (ast.Subscript, ast.Attribute))
            and any(isinstance(n, ast.Call) for n in ast.walk(x)) and not _has_scoped_names(x)]


def _is_unittest_assert(call: ast.Call) -> bool:
    f = call.func
    return (isinstance(f, ast.Attribute) and f.attr.startswith("assert")
            and isinstance(f.value, ast.Name) and f.value.id == "self")


def _outer_calls(expr: ast.AST) -> list[ast.Call]:
    """The outermost calls of `expr` that are worth a probe (below a builtin wrapper)."""
    if isinstance(expr, ast.Call):
        name = _called_name(expr)
        if name in _WRAPPERS:
            return [c for a in expr.args for c in _outer_calls(a)]
        if name.split(".")[0] in ("pytest", "self", "mock", "unittest"):
            return []
        return [expr] if not _has_scoped_names(expr) else []
    if isinstance(expr, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        return []
    return [c for child in ast.iter_child_nodes(expr) for c in _outer_calls(child)]


def _called_name(call: ast.Call) -> str:
    parts, f = [], call.func
    while isinstance(f, ast.Attribute):
        parts.append(f.attr)
        f = f.value
    if isinstance(f, ast.Name):
        parts.append(f.id)
    return ".".join(reversed(parts))


def _has_scoped_names(expr: ast.AST) -> bool:
    """Whether `expr` holds a lambda or a comprehension (names bound only inside it)."""
    return any(isinstance(n, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
                              ast.GeneratorExp, ast.NamedExpr)) for n in ast.walk(expr))


def _nudged(node: ast.AST) -> list:
    """Values near a literal: a number one up and one down; a string's first digit plus one,
    or, in a text of several words with none, the last letter of its longest word (four
    letters or more) moved one on in the alphabet (`'select a from table'` ->
    `'select a from tablf'`): the text keeps its shape, its value changes."""
    if not isinstance(node, ast.Constant) or isinstance(node.value, bool):
        return []
    value = node.value
    if type(value) in (int, float):
        return [value + 1, value - 1]
    if type(value) is str:
        at = next((i for i, ch in enumerate(value) if ch.isdigit()), None)
        if at is not None:
            return [value[:at] + str((int(value[at]) + 1) % 10) + value[at + 1:]]
        words = list(_WORD.finditer(value)) if _SEPARATOR.search(value.strip()) else []
        if words:
            word = max(reversed(words), key=lambda m: len(m[0]))  # the last of the longest
            at = word.end() - 1
            return [value[:at] + _next_letter(value[at]) + value[at + 1:]]
    return []


def _next_letter(ch: str) -> str:
    base = ord("a") if ch.islower() else ord("A")
    return chr(base + (ord(ch) - base + 1) % 26)


class _SoftAsserts(ast.NodeTransformer):
    """Every assertion runs its expression but cannot fail the test."""

    def visit_Assert(self, node: ast.Assert):
        return _try_pass(ast.Expr(node.test), node)

    def visit_Expr(self, node: ast.Expr):
        if isinstance(node.value, ast.Call) and _is_unittest_assert(node.value):
            return _try_pass(node, node)
        return node

    def visit_FunctionDef(self, node):  # nested helpers keep their own assertions
        return node

    visit_AsyncFunctionDef = visit_ClassDef = visit_Lambda = visit_FunctionDef


def _try_pass(stmt: ast.stmt, where: ast.AST) -> ast.Try:
    handler = ast.ExceptHandler(type=ast.Name("AssertionError", ast.Load()), name=None,
                                body=[ast.Pass()])
    return ast.copy_location(ast.Try(body=[stmt], handlers=[handler], orelse=[],
                                     finalbody=[]), where)


def _helper_source() -> str:
    """`call_values.fixed_hash` and `hash_ordered`, as the recording copies call them
    (`_sfrec_fixed_hash`, `_sfrec_hash_ordered`), appended to the recorded test file."""
    source = "\n\n".join(inspect.getsource(f) for f in (fixed_hash, hash_ordered))
    return re.sub(r"\b(fixed_hash|hash_ordered)\b", r"_sfrec_\1", source)


def _record_lines(key: str, expr: str, out_path: str) -> list[str]:
    """Record `expr`'s `repr`: None when it raises, holds a set whose order may change from
    run to run (`call_values.hash_ordered`) or gives another value when evaluated again (it
    depends on state it changes, such as the random generator's)."""
    return ["try:", f"    _sfrec_x = ({expr})",
            "    _sfrec_v = None if _sfrec_hash_ordered(_sfrec_x) else repr(_sfrec_x)",
            f"    if _sfrec_v is not None and repr(({expr})) != _sfrec_v:",
            "        _sfrec_v = None",
            "except BaseException:", "    _sfrec_v = None",
            f"with open({out_path!r}, 'a') as _sfrec_f:",
            f"    _sfrec_f.write(__import__('json').dumps([{key!r}, _sfrec_v]) + '\\n')"]


def function_candidates(text: str, functions: list[str]) -> dict[str, list[str]]:
    """`candidate_calls` of each of `functions` (ids `path::[Class::]name`) found in `text`."""
    tree = safe_ast.parse(text)
    found = {func: find_function(tree, func.split("::")[1:]) for func in functions}
    return {func: candidate_calls(hit[0]) for func, hit in found.items() if hit is not None}


def combined(runs: list[dict[str, str | None]], keys: dict[str, tuple[str, str]]
             ) -> dict[str, str]:
    """Per function, a tuple of its candidates that gave the same value in every gold run of
    `runs`, when there are two or more: one check over several calls has more values than any
    one of them (a call that returns a bool has two)."""
    by_function: dict[str, list[str]] = {}
    for key, (func, expr) in keys.items():
        values = {run.get(key) for run in runs}
        if len(values) == 1 and None not in values:
            by_function.setdefault(func, []).append(expr)
    return {func: f"({', '.join(exprs)},)" for func, exprs in by_function.items()
            if len(exprs) > 1}


def recording_file(text: str, exprs: dict[str, list[str]], out_path: str, start: int = 0
                   ) -> tuple[str, dict[str, tuple[str, str]]]:
    """`text` (a test file) with a recording copy per expression of `exprs` (function id ->
    expressions) inserted after its function; returns the new text and each copy's key
    (numbered from `start`) -> (function id, expression)."""
    tree = safe_ast.parse(text)
    lines = text.split("\n")
    inserts: list[tuple[int, list[str]]] = []
    keys: dict[str, tuple[str, str]] = {}
    for func, texts in exprs.items():
        hit = find_function(tree, func.split("::")[1:])
        if hit is None:
            continue
        node = hit[0]
        for expr in texts:
            key = f"{start + len(keys)}"
            keys[key] = (func, expr)
            inserts.append((node.end_lineno, _copy_lines(node, f"{REC_PREFIX}{key}", key, expr,
                                                         out_path)))
    for at, block in sorted(inserts, key=lambda x: -x[0]):
        lines[at:at] = block
    if keys:
        lines += ["", "", _helper_source()]
    return "\n".join(lines), keys


def _copy_lines(node, name: str, key: str, expr: str, out_path: str) -> list[str]:
    soft = copy.deepcopy(node)
    soft.body = [_SoftAsserts().visit(stmt) for stmt in soft.body]
    soft.name = name
    soft.body = soft.body + safe_ast.parse("\n".join(_record_lines(key, expr, out_path))).body
    ast.fix_missing_locations(soft)
    indent = " " * node.col_offset
    return [""] + [indent + line for line in ast.unparse(soft).split("\n")] + [""]


def read_values(text: str, keys: dict[str, tuple[str, str]]) -> dict[str, str | None]:
    """Each key's recorded value from the JSON lines a recording run wrote: the `repr`, or None
    when it raised, was not reached, names a memory address, is too long, or differed between
    the runs of a parametrized function."""
    seen: dict[str, set] = {}
    for line in text.splitlines():
        try:
            key, value = json.loads(line)
        except (ValueError, TypeError):
            continue
        seen.setdefault(str(key), set()).add(value)
    out: dict[str, str | None] = {}
    for key in keys:
        values = seen.get(key, {None})
        value = next(iter(values)) if len(values) == 1 else None
        if isinstance(value, str) and (len(value) > MAX_REPR or ADDRESS.search(value)):
            value = None
        out[key] = value
    return out


def candidates_for_pick(keys: dict[str, tuple[str, str]], gold_runs: list[dict],
                        base: dict, mutants: list[dict], twins: int) -> dict[str, list[dict]]:
    """Per function id, the candidates `behaviour.pick` takes (`scope`: the expression). Where
    the mutants give fewer than `twins` values other than the gold's and the base code's, the
    gold value with one boolean flipped or one digit changed (`decoys`) joins them."""
    out: dict[str, list[dict]] = {}
    for key, (func, expr) in keys.items():
        gold = [g.get(key) for g in gold_runs]
        values = [m.get(key) for m in mutants]
        usable = {v for v in values if v is not None} - {gold[0], base.get(key)}
        if gold[0] is not None and len(usable) < twins:
            values += [v for v in decoys(gold[0]) if v != base.get(key)]
        out.setdefault(func, []).append({
            "call": f"scope:{func.rpartition('::')[2]}", "args": "", "kwargs": "", "scope": expr,
            "traced": None, "gold": gold, "base": base.get(key), "mutants": values,
            "changed": True, "inner": False})
    return out


def decoys(gold: str, limit: int = 8) -> list[str]:
    """Values near `gold` (a `repr`): one `True`/`False` flipped, or one digit one up or down
    (mod 10), last digits first, never giving a number a leading zero; at most `limit`, never
    `gold` itself."""
    out = []
    for m in re.finditer(r"\b(True|False)\b", gold):
        out.append(gold[:m.start()] + ("False" if m[1] == "True" else "True") + gold[m.end():])
    for m in reversed(list(re.finditer(r"\d", gold))):
        for step in (1, -1):
            value = gold[:m.start()] + str((int(m[0]) + step) % 10) + gold[m.end():]
            if not _LEADING_ZERO.search(value[max(0, m.start() - 1):m.end() + 1]):
                out.append(value)
    return [v for v in dict.fromkeys(out) if v != gold][:limit]
