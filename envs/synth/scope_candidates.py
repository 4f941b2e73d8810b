"""Candidate checks in a deciding test's own scope: which expressions, evaluated again at the
end of the test's body, may tell the gold code from the base code and mutants
(`scope_probe.py` records them).

From the test's assertions: the calls they make and the sides of their comparisons that
reach a call, with the local names that simple assignments bound replaced by their values,
each with one literal nudged (never as the test writes it: its own assertion would say what
that returns); and from the calls the test expects to raise (a `pytest.raises` block, an
assertion method of the test class), what they raise, their inputs nudged.
"""

from __future__ import annotations

import ast
import builtins
import copy
import re
import unittest

from swefleet.envs.synth.scope_params import dotted_name

MAX_PER_FUNCTION = 10
"""Candidate expressions recorded per deciding test function."""
MAX_INLINED = 2000
"""Longest value (source characters) a local name is replaced by in a candidate."""
_BUILTINS = frozenset(dir(builtins))
_TESTCASE_ASSERTS = frozenset(n for n in dir(unittest.TestCase) if n.startswith("assert"))
_RAISES = ("raises", "assertRaises", "assertRaisesRegex")
_WORD = re.compile(r"(?<![A-Za-z])[A-Za-z]{4,}(?![A-Za-z])")
_SEPARATOR = re.compile(r"[\s.,;:()\[\]{}<>=*#|/_-]")
_REPLAYED = "_sfo"
"""The name a replay (`_replay`) gives the object it builds."""
_WRAPPERS = {"len", "list", "tuple", "sorted", "set", "frozenset", "dict", "str", "repr",
             "bool", "int", "float", "type", "isinstance", "next", "iter", "print", "any", "all"}


def candidate_calls(func: ast.FunctionDef | ast.AsyncFunctionDef,
                    params: list[dict[str, ast.expr]] | None = None,
                    helpers: frozenset[str] = frozenset()) -> list[str]:
    """Source texts of the expressions to evaluate at the end of `func`: the outermost calls
    inside its assertions (`assert X == Y`, `self.assertEqual(X, Y)`) that are not builtins or
    pytest's, and the sides of its comparisons that reach a call (`parse(sql)[0].value`), each
    with one literal in a call's arguments nudged (`_nudged`; inside list, tuple and dict
    displays too); then the same of the assertions with the local names that simple
    assignments before them bound replaced by what was assigned (`s = 'a b'; assert f(s) == x`
    gives `f('a c')`, `_asserted`); then what a call raises (`raised`), for the calls a
    `pytest.raises` or `assertRaises` block makes and the test class's own assertion methods
    (`self.assertMarkdownRenders(source, expected)`, its first argument nudged); at most
    `MAX_PER_FUNCTION`, no repeats. Never an expression as the test writes it, names replaced
    or not: the test's own assertion would say what it returns, and so which check
    contradicts it. A parametrized test's assertions are read with each of `params` (its
    parameter sets, `scope_params.parameter_sets`) bound, in turn; a call of one of `helpers`
    (the test module's own functions that assert, `isvalue(interp, 'x', 1)`) is an assertion
    method too."""
    found: list[ast.expr] = []
    for node in ast.walk(func):
        if isinstance(node, ast.Assert):
            found += _outer_calls(node.test) + _operands(node.test)
        elif isinstance(node, ast.Call) and is_unittest_assert(node):
            for arg in node.args:
                found += _outer_calls(arg) + _operands(arg)
    asserted = [x for env in params or [{}] for x in _asserted(func.body, env, helpers)]
    inlined = [x for e, nudge_in in asserted if nudge_in is None
               for x in _outer_calls(e) + _operands(e)]
    raising = [(e, nudge_in) for e, nudge_in in asserted if nudge_in is not None]
    written = {ast.unparse(expr) for expr in found + inlined + [e for e, _ in raising]}
    nudged = [ast.unparse(v) for expr in found + inlined if _names_code(expr)
              for v in _nudged_variants(expr)]
    nudged += [raised(ast.unparse(v)) for e, nudge_in in raising if _names_code(e)
               for v in _nudged_variants(e, nudge_in) if ast.unparse(v) not in written]
    return [text for text in dict.fromkeys(nudged) if text not in written][:MAX_PER_FUNCTION]


def raised(call: str) -> str:
    """An expression whose value is the exception `call` raises (its `repr` names the type
    and the message); it raises itself when `call` returns."""
    return f"__import__('pytest').raises(BaseException, lambda: {call}).value"


def _names_code(expr: ast.expr) -> bool:
    """Whether `expr` names anything but builtins (`'-'.join(['a', 'b'])` computes a value
    that no code under test changes)."""
    return any(isinstance(n, ast.Name) and n.id not in _BUILTINS for n in ast.walk(expr))


def _asserted(body: list[ast.stmt], env: dict[str, ast.expr],
              helpers: frozenset[str] = frozenset()) -> list[tuple[ast.expr, ast.AST | None]]:
    """What `body` asserts, in source order: (an `assert`'s test or a unittest assertion's
    argument, None), and (a call expected to raise, the part of it to nudge): a call that a
    `pytest.raises` or `assertRaises` block makes (all of it), a call of an assertion method
    the test class adds to unittest's (its first argument). Each has the names that `env` and
    the simple assignments (`name = <expression without a lambda or comprehension>`) before
    it bound replaced by their values; a name bound any other way (a loop, a `with`, a tuple,
    `+=`), or one whose value is not a literal and whose object a statement other than an
    assertion may change (`_changed_names`), is left as is from there on. A block inside sees
    the names bound before it that it does not bind."""
    env = dict(env)
    out: list[tuple[ast.expr, ast.AST | None]] = []
    for stmt in body:
        parts = _assertion_parts(stmt, env, helpers)
        out += parts or []
        if parts is None:  # a new object would not have the state the test gave this one,
            replayed = _replay(stmt, env)  # unless the calls that gave it are made again
            for name in _changed_names(stmt) & env.keys() - replayed:
                if not _is_literal(env[name]):
                    env.pop(name)
        for name in _bound_names(stmt):  # (a loop's names vary from one pass to the next)
            env.pop(name, None)
        if _expects_raise(stmt):
            out += [(call, call) for call in (_inline(inner.value, env) for inner in stmt.body
                                              if isinstance(inner, (ast.Expr, ast.Assign))
                                              and isinstance(inner.value, ast.Call))]
        if not isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for field in ("body", "orelse", "finalbody"):
                inner = getattr(stmt, field, None)
                if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                    out += _asserted(inner, env, helpers)
        _remember(stmt, env)
    return out


def _assertion_parts(stmt: ast.stmt, env: dict[str, ast.expr], helpers: frozenset[str]
                     ) -> list[tuple[ast.expr, ast.AST | None]] | None:
    """`_asserted`'s entries for `stmt`, names replaced; None when it is no assertion."""
    if isinstance(stmt, ast.Assert):
        return [(_inline(stmt.test, env), None)]
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
            and call.func.id in helpers and call.args):
        inlined = _inline(call, env)
        return [(inlined, inlined.args[0])]
    if not (isinstance(call, ast.Call) and is_unittest_assert(call)):
        return None
    if call.func.attr in _TESTCASE_ASSERTS:
        return [(_inline(arg, env), None) for arg in call.args]
    if not call.args:
        return []
    inlined = _inline(call, env)
    return [(inlined, inlined.args[0])]


def _remember(stmt: ast.stmt, env: dict[str, ast.expr]) -> None:
    """Bind the name of a simple assignment (`name = <expression without a lambda or
    comprehension>`) to its value, names replaced, in `env`."""
    if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1
            and isinstance(stmt.targets[0], ast.Name) and not _has_scoped_names(stmt.value)):
        value = _inline(stmt.value, env)
        if len(ast.unparse(value)) <= MAX_INLINED:
            env[stmt.targets[0].id] = value


def _replay(stmt: ast.stmt, env: dict[str, ast.expr]) -> set[str]:
    """For a statement that calls a name `env` binds to an object, or a method of it
    (`interp('x = 1')`, `interp.run('x = 1')`), bind that name to an expression that builds
    the object and makes the call on it
    (`(lambda _sfo: (_sfo.run('x = 1'), _sfo)[-1])(make_interpreter())`), its other names
    replaced; returns the names so bound (none for any other statement)."""
    call = stmt.value if isinstance(stmt, ast.Expr) else None
    if not isinstance(call, ast.Call) or _has_scoped_names(call):
        return set()
    receiver = call.func
    while isinstance(receiver, (ast.Attribute, ast.Subscript)):
        receiver = receiver.value
    if not (isinstance(receiver, ast.Name) and receiver.id in env
            and not _is_literal(env[receiver.id])):
        return set()
    name = receiver.id
    made = _inline(call, {k: v for k, v in env.items() if k != name})
    made = _Inliner({name: ast.Name(_REPLAYED, ast.Load())}).visit(made)
    replay = ast.Call(ast.Lambda(
        ast.arguments(posonlyargs=[], args=[ast.arg(_REPLAYED)], kwonlyargs=[], kw_defaults=[],
                      defaults=[]),
        ast.Subscript(ast.Tuple([made, ast.Name(_REPLAYED, ast.Load())], ast.Load()),
                      ast.UnaryOp(ast.USub(), ast.Constant(1)), ast.Load())),
        [env[name]], [])
    if len(ast.unparse(replay)) > MAX_INLINED:
        return set()
    env[name] = replay
    return {name}


def _expects_raise(stmt: ast.stmt) -> bool:
    """Whether `stmt` is a `with pytest.raises(...)` or `with self.assertRaises(...)` block."""
    return isinstance(stmt, ast.With) and any(
        isinstance(item.context_expr, ast.Call)
        and _called_name(item.context_expr).rpartition(".")[2] in _RAISES
        for item in stmt.items)


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


def _nudged_variants(expr: ast.expr, within: ast.AST | None = None) -> list[ast.expr]:
    """Copies of `expr` with one literal of a call's arguments nudged (`_nudged`); only the
    literals inside `within` (a node of `expr`) when given, else only those inside its
    replays where it has some (the object's own calls are nudged as the test writes them)."""
    literals = {id(node) for node in _argument_literals(expr)}
    replays = [n for n in ast.walk(expr) if isinstance(n, ast.Call) and _is_replay(n.func)]
    if within is None and replays:
        literals &= {id(node) for r in replays for node in ast.walk(r)}
    if within is not None and within is not expr:
        literals &= {id(node) for node in ast.walk(within)}
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
        elif isinstance(node, ast.Starred):
            collect(node.value)
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


def is_unittest_assert(call: ast.Call) -> bool:
    f = call.func
    return (isinstance(f, ast.Attribute) and f.attr.startswith("assert")
            and isinstance(f.value, ast.Name) and f.value.id == "self")


def _outer_calls(expr: ast.AST) -> list[ast.Call]:
    """The outermost calls of `expr` that are worth a probe (below a builtin wrapper)."""
    if isinstance(expr, ast.Call):
        if _is_replay(expr.func):  # the rebuilt object itself: its value is its state
            return []
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
    return dotted_name(call.func)


def _has_scoped_names(expr: ast.AST) -> bool:
    """Whether `expr` holds a lambda or a comprehension (names bound only inside it), other
    than the replays `_replay` makes."""
    return any(isinstance(n, (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp,
                              ast.GeneratorExp, ast.NamedExpr))
               and not _is_replay(n) for n in ast.walk(expr))


def _is_replay(node: ast.AST) -> bool:
    return isinstance(node, ast.Lambda) and [a.arg for a in node.args.args] == [_REPLAYED]


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
        digit_up = first_digit_up(value)
        if digit_up is not None:
            return [digit_up]
        words = list(_WORD.finditer(value)) if _SEPARATOR.search(value.strip()) else []
        if words:
            word = max(reversed(words), key=lambda m: len(m[0]))  # the last of the longest
            at = word.end() - 1
            return [value[:at] + _next_letter(value[at]) + value[at + 1:]]
    return []


def first_digit_up(text: str) -> str | None:
    """`text` with its first digit (0-9) one up, 9 giving 0; None when it has none."""
    at = next((i for i, ch in enumerate(text) if ch in "0123456789"), None)
    return None if at is None else text[:at] + str((int(text[at]) + 1) % 10) + text[at + 1:]


def _next_letter(ch: str) -> str:
    base = ord("a") if ch.islower() else ord("A")
    return chr(base + (ord(ch) - base + 1) % 26)
