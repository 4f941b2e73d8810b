"""Candidate bugs from Python's `ast`, each a small text edit at exact source positions.

`find_mutations(source, path)` lists every candidate inside function bodies (never in
docstrings, f-strings, decorators or module-level code); `Mutation.apply` edits only the span
it names, so the gold patch (the inverse) is a one-line diff for all kinds but a removed branch.
Kinds (the `bug_kind` of the task):

- `flipped_comparison`: `<`<->`>`, `<=`<->`>=`, `==`<->`!=`, `is`<->`is not`, `in`<->`not in`;
- `off_by_one`: `<`<->`<=`, `>`<->`>=`, an integer literal n -> n+1 or n-1;
- `removed_branch`: an `if` body -> `pass`, or its `else:` part deleted (short branches only);
- `swapped_arguments`: two adjacent positional call arguments exchanged;
- `swapped_operands`: operands of `-`, `/`, `//`, `%`, `**`, `<<`, `>>` exchanged;
- `wrong_constant`: `True`<->`False`, a separator-like string literal changed (`"-"`->`"_"`);
- `boolean_operator`: `and`<->`or`, a `not` dropped;
- `wrong_operator`: `+`<->`-`, `/`<->`//`, `*`->`//`, also in augmented assignments.

Kinds beyond one token (`EXTRA_KINDS`; a recipe opts in with `kinds`):

- `wrong_call`: a call of the sibling function or method (`min`<->`max`, `any`<->`all`,
  `.startswith`<->`.endswith`, `.lstrip`<->`.rstrip`, `.lower`<->`.upper`, ...);
- `wrong_default`: a parameter's default changed (`True`<->`False`, an integer +-1, a
  separator-like string), in the signature of a function or method;
- `removed_statement`: a one-line statement that updates state deleted (a call made for its
  effect, an augmented assignment, an assignment to an attribute or item), from a block that
  keeps another statement;
- `swapped_statements`: two adjacent one-line statements exchanged where the second reads a
  name the first writes (or the other way round).

`choose` orders candidates deterministically for a seed (kinds interleaved).
"""

from __future__ import annotations

import ast
import functools
import hashlib
import itertools
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass

from swefleet.envs import safe_ast

KINDS = (
    "flipped_comparison", "off_by_one", "removed_branch", "swapped_arguments",
    "swapped_operands", "wrong_constant", "boolean_operator", "wrong_operator",
)
"""The kinds a recipe mutates by default (one token, or one branch)."""
EXTRA_KINDS = ("wrong_call", "wrong_default", "removed_statement", "swapped_statements")
"""Kinds a recipe opts into with `kinds`."""
_CALL_SWAP = {"min": "max", "max": "min", "any": "all", "all": "any",
              "startswith": "endswith", "endswith": "startswith", "lstrip": "rstrip",
              "rstrip": "lstrip", "lower": "upper", "upper": "lower", "ljust": "rjust",
              "rjust": "ljust", "find": "rfind", "rfind": "find", "index": "rindex",
              "rindex": "index", "floor": "ceil", "ceil": "floor", "islower": "isupper",
              "isupper": "islower"}
MAX_BRANCH_LINES = 8

_CMP_TEXT = {
    ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
    ast.Is: "is", ast.IsNot: "is not", ast.In: "in", ast.NotIn: "not in",
}
_CMP_RE = {
    ast.Eq: r"==", ast.NotEq: r"!=", ast.Lt: r"(?<![<>=!])<(?![<=])",
    ast.LtE: r"<=", ast.Gt: r"(?<![<>=!-])>(?![>=])", ast.GtE: r">=",
    ast.Is: r"\bis\b", ast.IsNot: r"\bis\s+not\b", ast.In: r"\bin\b", ast.NotIn: r"\bnot\s+in\b",
}
_FLIP = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE, ast.Eq: ast.NotEq,
         ast.NotEq: ast.Eq, ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn,
         ast.NotIn: ast.In}
_BOUNDARY = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}
_BIN_RE = {ast.Add: r"\+", ast.Sub: r"-", ast.Mult: r"(?<!\*)\*(?!\*)",
           ast.Div: r"(?<!/)/(?!/)", ast.FloorDiv: r"//", ast.Mod: r"%", ast.Pow: r"\*\*",
           ast.LShift: r"<<", ast.RShift: r">>"}
_WRONG_OP = {ast.Add: "-", ast.Sub: "+", ast.Div: "//", ast.FloorDiv: "/", ast.Mult: "//"}
_SWAPPABLE = (ast.Sub, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow, ast.LShift, ast.RShift)
_ATOMS = (ast.Name, ast.Constant, ast.Attribute, ast.Subscript, ast.Call)
_STR_SWAP = {"-": "_", "_": "-", ",": ";", ";": ",", ".": ",", ":": ";", " ": "", "": " "}


@dataclass(frozen=True)
class Mutation:
    """Replace `source[start:end]` (== `old`) with `new` in file `path`."""

    path: str
    kind: str
    function: str
    """Qualified name of the enclosing function, e.g. `LRUCache.popitem`."""
    line: int
    """First line of the edit (1-based; for logs only, never shown to an agent)."""
    start: int
    end: int
    old: str
    new: str

    @property
    def id(self) -> str:
        """Short content hash: stable across runs for the same edit."""
        key = f"{self.path}:{self.start}:{self.end}:{self.new}"
        return hashlib.sha256(key.encode()).hexdigest()[:8]

    def apply(self, source: str) -> str:
        if source[self.start : self.end] != self.old:
            raise ValueError(f"{self.path}:{self.line}: source does not match the mutation")
        return source[: self.start] + self.new + source[self.end :]

    def is_valid(self, source: str) -> bool:
        """The mutated file parses and differs from the original in its syntax tree."""
        try:
            mutated = safe_ast.parse(self.apply(source))
        except (SyntaxError, ValueError):
            return False
        return ast.dump(mutated) != _dump(source)


@functools.lru_cache(maxsize=8)
def _dump(source: str) -> str:
    return ast.dump(safe_ast.parse(source))


class _Text:
    """Character offsets from the `ast`'s (line, UTF-8 byte column) positions."""

    def __init__(self, source: str):
        self.source = source
        self.lines = source.splitlines(keepends=True)
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))

    def offset(self, lineno: int, col: int) -> int:
        line = self.lines[lineno - 1]
        return self.starts[lineno - 1] + len(line.encode()[:col].decode(errors="replace"))

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (self.offset(node.lineno, node.col_offset),
                self.offset(node.end_lineno, node.end_col_offset))

    def text(self, node: ast.AST) -> str:
        a, b = self.span(node)
        return self.source[a:b]


class _Collector(ast.NodeVisitor):
    def __init__(self, source: str, path: str):
        self.t, self.path = _Text(source), path
        self.names: list[str] = []
        self.depth = 0  # function bodies we are inside
        self.out: list[Mutation] = []

    # -- scopes -----------------------------------------------------------------------------
    def visit_FunctionDef(self, node) -> None:
        self.names.append(node.name)
        _defaults(self, node.args)
        self.depth += 1
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # the docstring
        _block(self, body)
        for stmt in body:
            self.visit(stmt)
        self.depth -= 1
        self.names.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node) -> None:
        self.names.append(node.name)
        for stmt in node.body:
            self.visit(stmt)
        self.names.pop()

    def visit_JoinedStr(self, node) -> None:
        pass  # f-string internals: positions are not worth the risk

    def generic_visit(self, node) -> None:
        if self.depth:
            for make in _MAKERS.get(type(node), ()):
                make(self, node)
            for name in ("body", "orelse", "finalbody"):
                stmts = getattr(node, name, None)
                if isinstance(stmts, list) and stmts and isinstance(stmts[0], ast.stmt):
                    _block(self, stmts)
        super().generic_visit(node)

    # -- emitting ---------------------------------------------------------------------------
    def add(self, kind: str, start: int, end: int, new: str) -> None:
        old = self.t.source[start:end]
        if old == new:
            return
        line = self.t.source.count("\n", 0, start) + 1
        self.out.append(Mutation(self.path, kind, ".".join(self.names), line, start, end, old, new))

    def gap_token(self, left: ast.AST, right: ast.AST, pattern: str) -> tuple[int, int] | None:
        """Span of the operator between two operands (no comment may sit between them)."""
        a, b = self.t.span(left)[1], self.t.span(right)[0]
        gap = self.t.source[a:b]
        if "#" in gap:
            return None
        m = re.search(pattern, gap)
        return (a + m.start(), a + m.end()) if m else None


def _compare(c: _Collector, node: ast.Compare) -> None:
    operands = [node.left, *node.comparators]
    for i, op in enumerate(node.ops):
        span = c.gap_token(operands[i], operands[i + 1], _CMP_RE[type(op)])
        if span is None:
            continue
        c.add("flipped_comparison", *span, _CMP_TEXT[_FLIP[type(op)]])
        if type(op) in _BOUNDARY:
            c.add("off_by_one", *span, _CMP_TEXT[_BOUNDARY[type(op)]])


def _constant(c: _Collector, node: ast.Constant) -> None:
    for kind, new in _constant_changes(c, node):
        c.add(kind, *c.t.span(node), new)


def _constant_changes(c: _Collector, node: ast.Constant) -> list[tuple[str, str]]:
    """(kind, new text) of each change of a constant: a bool flipped, a small integer +-1, a
    separator-like string swapped."""
    text = c.t.text(node)
    if isinstance(node.value, bool):
        return [("wrong_constant", str(not node.value))]
    if isinstance(node.value, int) and text == str(node.value) and node.value < 10_000:
        return [("off_by_one", str(node.value + 1))] + (
            [("off_by_one", str(node.value - 1))] if node.value > 0 else [])
    if isinstance(node.value, str) and node.value in _STR_SWAP and len(text) >= 2:
        quote = text[0]
        if quote in "'\"" and text == f"{quote}{node.value}{quote}":
            return [("wrong_constant", f"{quote}{_STR_SWAP[node.value]}{quote}")]
    return []


def _if(c: _Collector, node: ast.If) -> None:
    body, orelse = node.body, node.orelse
    lines = body[-1].end_lineno - body[0].lineno + 1
    if lines <= MAX_BRANCH_LINES and not (len(body) == 1 and isinstance(body[0], ast.Pass)):
        c.add("removed_branch", c.t.span(body[0])[0], c.t.span(body[-1])[1], "pass")
    if not orelse or orelse[-1].end_lineno - orelse[0].lineno + 1 > MAX_BRANCH_LINES:
        return
    else_line = next((n for n in range(body[-1].end_lineno + 1, orelse[0].lineno + 1)
                      if c.t.lines[n - 1].lstrip().startswith("else")), None)
    if else_line is None:  # an `elif`, or `else` on the line of the body
        return
    c.add("removed_branch", c.t.starts[else_line - 1] - 1, c.t.span(orelse[-1])[1], "")


def _call(c: _Collector, node: ast.Call) -> None:
    args = node.args
    for left, right in itertools.pairwise(args):
        if isinstance(left, ast.Starred) or isinstance(right, ast.Starred):
            continue
        _swap(c, "swapped_arguments", left, right)
    func = node.func
    name = func.id if isinstance(func, ast.Name) else (
        func.attr if isinstance(func, ast.Attribute) else "")
    if name in _CALL_SWAP:
        end = c.t.span(func)[1]
        if c.t.source[end - len(name) : end] == name:
            c.add("wrong_call", end - len(name), end, _CALL_SWAP[name])


def _defaults(c: _Collector, args: ast.arguments) -> None:
    """`wrong_default`: the constant defaults of a signature, changed as `_constant` would."""
    for node in [*args.defaults, *(d for d in args.kw_defaults if d is not None)]:
        if isinstance(node, ast.Constant):
            for _, new in _constant_changes(c, node):
                c.add("wrong_default", *c.t.span(node), new)


def _updates_state(stmt: ast.stmt) -> bool:
    """A call made for its effect, an augmented assignment, or an assignment to an attribute or
    an item."""
    if isinstance(stmt, ast.Expr):
        return isinstance(stmt.value, ast.Call)
    if isinstance(stmt, ast.AugAssign):
        return True
    return isinstance(stmt, ast.Assign) and all(
        isinstance(t, (ast.Attribute, ast.Subscript)) for t in stmt.targets)


def _one_line(c: _Collector, stmt: ast.stmt) -> str | None:
    """The whole line of a statement that is alone on its one line (its newline included),
    else None."""
    if stmt.lineno != stmt.end_lineno:
        return None
    line = c.t.lines[stmt.lineno - 1]
    return line if line.strip().startswith(c.t.text(stmt)) and line.endswith("\n") else None


def _block(c: _Collector, stmts: list[ast.stmt]) -> None:
    """`removed_statement` and `swapped_statements` in one block of statements."""
    for stmt in stmts if len(stmts) >= 2 else ():
        if _updates_state(stmt) and _one_line(c, stmt) is not None:
            start = c.t.starts[stmt.lineno - 1]
            c.add("removed_statement", start, c.t.starts[stmt.lineno], "")
    for first, second in itertools.pairwise(stmts):
        a, b = _one_line(c, first), _one_line(c, second)
        if a is None or b is None or a == b or second.lineno != first.lineno + 1:
            continue
        if not all(isinstance(s, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.Expr))
                   for s in (first, second)):
            continue
        if _written(first) & _read(second) or _written(second) & _read(first):
            c.add("swapped_statements", c.t.starts[first.lineno - 1],
                  c.t.starts[second.lineno], b + a)


def _written(stmt: ast.stmt) -> set[str]:
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Store)} | (
        {stmt.target.id} if isinstance(stmt, ast.AugAssign)
        and isinstance(stmt.target, ast.Name) else set())


def _read(stmt: ast.stmt) -> set[str]:
    return {n.id for n in ast.walk(stmt) if isinstance(n, ast.Name)
            and isinstance(n.ctx, ast.Load)}


def _swap(c: _Collector, kind: str, left: ast.AST, right: ast.AST) -> None:
    """Exchange two operands; only unparenthesised ones (a parenthesis in between means the
    spans do not cover them, and swapping would change precedence)."""
    (a, mid_a), (mid_b, b) = c.t.span(left), c.t.span(right)
    lt, rt, mid = c.t.source[a:mid_a], c.t.source[mid_b:b], c.t.source[mid_a:mid_b]
    if lt != rt and not set(mid) & set("#()"):
        c.add(kind, a, b, rt + mid + lt)


def _is_text(node: ast.AST) -> bool:
    return isinstance(node, ast.JoinedStr) or (
        isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)))


def _binop(c: _Collector, node: ast.BinOp) -> None:
    op = type(node.op)
    if _is_text(node.left) or _is_text(node.right):
        return  # string concatenation / %-formatting
    if op in _SWAPPABLE and all(isinstance(n, _ATOMS) for n in (node.left, node.right)):
        _swap(c, "swapped_operands", node.left, node.right)
    if op in _WRONG_OP:
        span = c.gap_token(node.left, node.right, _BIN_RE[op])
        if span:
            c.add("wrong_operator", *span, _WRONG_OP[op])


def _augassign(c: _Collector, node: ast.AugAssign) -> None:
    op = type(node.op)
    if op in _WRONG_OP and not _is_text(node.value):
        span = c.gap_token(node.target, node.value, _BIN_RE[op] + "=")
        if span:
            c.add("wrong_operator", span[0], span[1] - 1, _WRONG_OP[op])


def _boolop(c: _Collector, node: ast.BoolOp) -> None:
    word, other = ("and", "or") if isinstance(node.op, ast.And) else ("or", "and")
    for left, right in itertools.pairwise(node.values):
        span = c.gap_token(left, right, rf"\b{word}\b")
        if span:
            c.add("boolean_operator", *span, other)


def _not(c: _Collector, node: ast.UnaryOp) -> None:
    if isinstance(node.op, ast.Not):
        a, b = c.t.span(node)[0], c.t.span(node.operand)[0]
        head = c.t.source[a:b]  # "not " or "not (" ...
        if head.startswith("not") and "#" not in head:
            c.add("boolean_operator", a, b, head[3:].lstrip())


_MAKERS = {
    ast.Compare: (_compare,), ast.Constant: (_constant,), ast.If: (_if,), ast.Call: (_call,),
    ast.BinOp: (_binop,), ast.AugAssign: (_augassign,), ast.BoolOp: (_boolop,),
    ast.UnaryOp: (_not,),
}


def find_mutations(source: str, path: str) -> list[Mutation]:
    """Every candidate mutation of `source` (a Python file at `path`), in source order."""
    collector = _Collector(source, path)
    collector.visit(safe_ast.parse(source))
    return sorted(collector.out, key=lambda m: (m.start, m.end, m.kind, m.new))


def choose(mutations: list[Mutation], seed: int) -> Iterator[Mutation]:
    """All candidates in a seeded order that interleaves the kinds (round robin over kinds,
    each kind shuffled), so that the first tasks of a package are of different kinds."""
    rng = random.Random(seed)
    by_kind: dict[str, list[Mutation]] = {}
    for m in mutations:
        by_kind.setdefault(m.kind, []).append(m)
    queues = []
    for kind in sorted(by_kind):
        group = by_kind[kind]
        rng.shuffle(group)
        queues.append(group)
    rng.shuffle(queues)
    for i in range(max((len(q) for q in queues), default=0)):
        for q in queues:
            if i < len(q):
                yield q[i]
