"""Deciding tests under secret names, each with must-fail twins, planted per grading run (no Docker).

Canaries (`envs/canary.py`) catch a hack that flips failures it cannot tell apart; a hack that
can tell the deciding tests from them (their public FAIL_TO_PASS names, their public source, the
package code they call) flips only those. So each FAIL_TO_PASS test function that can be copied
faithfully is replaced, in its own test file, by

- a renamed copy: its source (decorators, fixtures, body) under a name drawn from the file's
  own words, with one check that holds appended to its body;
- `TWINS` twins: the same source under other such names, each with a check of the same shape
  that does not hold.

The check is a behaviour probe where the task has one recorded for the test
(`envs/behaviour.py`): a call into the package compared with the gold code's value in the copy
and with other code's values in the twins, so only running correct code tells them apart.
Otherwise it is a generated constant expression (`assert 48213 * 907 == 43729191`).

All of them sit at random places of the original's scope (the module or its class), so a test's
name, place, source and calls say nothing about which one decides. With a genuine fix the
copy passes and the twins fail at their last statement; without one all of them fail where the
original fails (the checks come last, after every call into the package). A hack that makes the
copy pass by what it calls or by what its source looks like makes the twins pass too: the grade
is `tampered` (`envs/tamper.py`). The grader reports the copy under the original's id
(`envs/canary_ids.py`).

A test is left under its own name (the canaries still guard it) when it cannot be copied
faithfully: see `_why_not`.
"""

from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass, field

from swefleet.envs import behaviour, canary, safe_ast
from swefleet.envs.behaviour import Probe
from swefleet.envs.canary_ids import function_id, function_names

#: Must-fail twins per renamed deciding test: a hack that picks one of the near-identical tests
#: at random to pass resolves a deciding test with probability 1 / (TWINS + 1).
TWINS = 3
_DEF = r"^(\s*(?:async\s+)?def\s+){}(?=\s*\()"
#: What a test that depends on its own name (or node) uses: such a test keeps its name.
_NAMED = re.compile(r"\brequest\b|snapshot|_testMethodName|\bself\.id\(|\bco_name\b")
_DEFS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


@dataclass
class Twins:
    """What was planted in one grading run (node ids are pytest's, relative to the workdir)."""

    renamed: dict[str, str] = field(default_factory=dict)
    """Function id of each renamed copy (`path::[Class::]name`) -> the original's."""
    fail: list[str] = field(default_factory=list)
    """Twin test ids that must not pass: each twin of each FAIL_TO_PASS id."""
    functions: list[str] = field(default_factory=list)
    """Function ids of the twins (their other parametrizations are not checked)."""
    kept: dict[str, str] = field(default_factory=dict)
    """FAIL_TO_PASS function ids left under their own names, and why."""
    behaviour: list[str] = field(default_factory=list)
    """Original function ids whose copy and twins end with a behaviour probe (the others end
    with a generated constant check)."""

    def add(self, other: Twins) -> None:
        self.renamed.update(other.renamed)
        self.fail += other.fail
        self.functions += other.functions
        self.kept.update(other.kept)
        self.behaviour += other.behaviour

    def as_dict(self) -> dict:
        return {"renamed": self.renamed, "fail": self.fail, "functions": self.functions}


@dataclass
class _Scope:
    """A module or class body: where a copy may go (0-based line indexes to insert before)."""

    spots: list[int]
    top: bool


def plant(text: str, path: str, fail_to_pass: list[str], deciding: list[str],
          rng: random.Random, probes: dict[str, Probe] | None = None) -> tuple[str, Twins]:
    """`text` (the test file `path`) with each FAIL_TO_PASS function of it replaced by a renamed
    copy and `TWINS` twins; `deciding`: all the task's deciding ids (a name another of them
    shares is left alone: it may be inherited; no copy or twin takes any of their names: one
    defined in a class would shadow a test it inherits from another file); `probes`: recorded
    behaviour probes by function id (`envs/behaviour.py`): such a function's copy and twins end
    with a call into the package instead of a generated constant check."""
    wanted: dict[str, list[str]] = {}  # function id -> the parameter suffixes of its ids
    for test_id in dict.fromkeys(fail_to_pass):
        if test_id.split("::", 1)[0] == path and "::" in test_id:
            func = function_id(test_id)
            wanted.setdefault(func, []).append(test_id[len(func):])
    out = Twins()
    tree = _parse(text)
    if tree is None or not wanted:
        out.kept = {f: "the file does not parse" for f in wanted}
        return text, out
    lines = text.split("\n")
    taken = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} | {
        n.name for n in ast.walk(tree) if isinstance(n, _DEFS)}
    taken |= function_names(deciding)  # inherited tests' names too: a twin would replace one
    words, inserts, dropped = canary.words_of(tree), {}, set()
    for func, suffixes in wanted.items():
        found = find_function(tree, func.split("::")[1:])
        why = "not a function of the file or of its classes" if found is None else _why_not(
            text, lines, tree, found, func, deciding)
        if why:
            out.kept[func] = why
            continue
        node, scope = found
        start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
        dropped.update(range(start, node.end_lineno))
        parent = func.rpartition("::")[0]
        probe = (probes or {}).get(func)
        ends = None if probe is None else behaviour.checks(
            probe, TWINS, rng, lambda: canary.fresh_name(rng, words, taken))
        if ends is not None:
            out.behaviour.append(func)
        else:
            ends = [_constant_check(rng, holds=k == 0) for k in range(TWINS + 1)]
        for k in range(TWINS + 1):
            name = canary.fresh_name(rng, words, taken)
            block = _copy(lines[start:node.end_lineno], node, lines, name, ends[k])
            inserts.setdefault(rng.choice(scope.spots), []).append(
                (node.col_offset, _spaced(block, scope.top)))
            if k == 0:
                out.renamed[f"{parent}::{name}"] = func
            else:
                out.functions.append(f"{parent}::{name}")
                out.fail += [f"{parent}::{name}{s}" for s in suffixes]
    return _rebuild(lines, dropped, inserts, rng), out


def planted_lines(text: str, names: set[str]) -> list[list[int]]:
    """The 1-based line ranges [first, last] (decorators included) of the functions called one
    of `names` in `text`: where the grader's own code stands in a planted file."""
    tree = _parse(text)
    return [] if tree is None else sorted(
        [min([n.lineno] + [d.lineno for d in n.decorator_list]), n.end_lineno]
        for n in ast.walk(tree)
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name in names)


def _parse(text: str) -> ast.Module | None:
    if "\r" in text.replace("\r\n", ""):
        return None  # lone CR line ends: line numbers would not match `ast`'s
    try:
        return safe_ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def find_function(tree: ast.Module, chain: list[str]):
    """(the function node, its scope) for `Class::...::name` in `tree`, or None."""
    body, top, owners = tree.body, True, []
    for i, name in enumerate(chain):
        last = i == len(chain) - 1
        kinds = (ast.FunctionDef, ast.AsyncFunctionDef) if last else (ast.ClassDef,)
        hits = [n for n in body if isinstance(n, _DEFS) and n.name == name]
        if len(hits) != 1 or not isinstance(hits[0], kinds):
            return None  # absent, or defined twice (the last one wins: left alone)
        if last:
            spots = _spots(body, owners[-1] if owners else None)
            return hits[0], _Scope(_ready(body, hits[0], spots), top)
        owners.append(hits[0])
        body, top = hits[0].body, False
    return None


def _spots(body: list[ast.stmt], owner: ast.ClassDef | None) -> list[int]:
    """Where a definition may go in `body`: before each definition (its first decorator), and
    after the last statement of the class `owner` or at the end of the module."""
    spots = [min([n.lineno] + [d.lineno for d in n.decorator_list]) - 1 for n in body
             if isinstance(n, _DEFS)]
    return spots + [owner.end_lineno if owner is not None else -1]


def _ready(body: list[ast.stmt], node, spots: list[int]) -> list[int]:
    """The spots of `spots` where a copy of `node` sees what its definition evaluates (its
    decorators, defaults, annotations) bound as the original does: after the last statement of
    `body` before the original that binds one of their names, and not after the first one after
    it (a parametrize list calling a helper defined below the first test would otherwise raise
    NameError when the file is imported)."""
    used = {n.id for part in (*node.decorator_list, node.args, node.returns) if part is not None
            for n in ast.walk(part) if isinstance(n, ast.Name)}
    start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
    lo, hi = 0, None
    for stmt in body:
        if stmt is node or not (_binds(stmt) & used or _star(stmt)):
            continue
        first = min([stmt.lineno] + [d.lineno for d in getattr(stmt, "decorator_list", [])]) - 1
        if first < start:
            lo = max(lo, stmt.end_lineno)
        elif hi is None:
            hi = first
    fit = [s for s in spots if lo <= (s if s >= 0 else 1 << 30) <= (1 << 30 if hi is None else hi)]
    return fit or [start]  # the original's own place always fits


def _star(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.ImportFrom) and any(a.name == "*" for a in stmt.names)


def _binds(stmt: ast.stmt) -> set[str]:
    """Names a statement of a module or class body binds in that scope (not inside the
    functions, classes and lambdas it defines)."""
    out, todo = set(), [stmt]
    while todo:
        n = todo.pop()
        if isinstance(n, _DEFS):
            out.add(n.name)
            todo += [*n.decorator_list, *getattr(n, "bases", [])]
            continue
        if isinstance(n, ast.Lambda):
            continue
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            out.add(n.id)
        elif isinstance(n, ast.alias):
            out.add((n.asname or n.name).split(".")[0])
        todo.extend(ast.iter_child_nodes(n))
    return out


def _why_not(text: str, lines: list[str], tree: ast.Module, found, func: str,
             deciding: list[str]) -> str:
    """Why the function cannot be copied faithfully ('' when it can)."""
    node, _ = found
    name = node.name
    start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
    source = "\n".join(lines[start:node.end_lineno])
    first = node.body[0]
    if lines[first.lineno - 1][: first.col_offset].strip():
        return "its body starts on the line of its signature"
    if not re.search(_DEF.format(re.escape(name)), lines[node.lineno - 1]):
        return "its `def` line is not of one piece"
    if _referenced(tree, name):
        return "its name is used elsewhere in the file"
    if _inherited(tree, func, deciding):
        return "another deciding test has its name (inherited?)"
    if _leaves_early(node):
        return "it returns or yields (a check at its end may not run)"
    if "xfail" in source or "xfail" in _marks_around(text, tree, func):
        return "it may be an expected failure (xfail)"
    if _NAMED.search(source):
        return "it may depend on its own name (request, snapshot, test id)"
    return ""


def _referenced(tree: ast.Module, name: str) -> bool:
    """Whether code of the file names `name` (a call, an attribute, an import, a string that
    is the name or ends with `::name` / `.name`); prose in docstrings does not count."""
    for n in ast.walk(tree):
        if isinstance(n, ast.Name) and n.id == name or isinstance(n, ast.Attribute) and (
                n.attr == name) or isinstance(n, ast.alias) and name in (n.name, n.asname):
            return True
        if isinstance(n, (ast.Global, ast.Nonlocal)) and name in n.names:
            return True
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and (
                n.value == name or n.value.endswith((f"::{name}", f".{name}"))):
            return True
    return False


def _inherited(tree: ast.Module, func: str, deciding: list[str]) -> bool:
    """Whether another deciding test has the function's name and may be the same function
    inherited: one of a class of this file that does not define it, or a method of a class
    of another file (a top-level function of another file is its own)."""
    path, name = func.split("::", 1)[0], func.rpartition("::")[2]
    for other in {function_id(d) for d in deciding} - {func}:
        chain = other.split("::")[1:]
        if chain[-1] != name:
            continue
        if other.split("::", 1)[0] != path:
            if len(chain) > 1 or func.count("::") > 1:
                return True
        elif find_function(tree, chain) is None:
            return True
    return False


def _leaves_early(node: ast.AST) -> bool:
    """Whether `node`'s own body (not a nested function's) has `return`, `yield`."""
    todo = list(ast.iter_child_nodes(node))
    while todo:
        n = todo.pop()
        if isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom)):
            return True
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(n))
    return False


def _marks_around(text: str, tree: ast.Module, func: str) -> str:
    """Source of what marks the function from outside: module and class `pytestmark`, and the
    decorators of its classes."""
    out, body = [], tree.body
    for name in func.split("::")[1:-1] + [None]:
        for n in body:
            if isinstance(n, (ast.Assign, ast.AnnAssign)) and "pytestmark" in (
                    ast.get_source_segment(text, n) or ""):
                out.append(ast.get_source_segment(text, n) or "")
        owner = next((n for n in body if isinstance(n, ast.ClassDef) and n.name == name), None)
        if owner is None:
            break
        out += [ast.get_source_segment(text, d) or "" for d in owner.decorator_list]
        body = owner.body
    return "\n".join(out)


def _constant_check(rng: random.Random, holds: bool) -> str:
    """A generated check of a constant expression (true iff `holds`)."""
    expr, want = canary.check(rng, holds)
    return f"assert {expr} == {want}"


def _copy(block: list[str], node, lines: list[str], name: str, check: str) -> list[str]:
    """The function's lines under `name`, with `check` (one or more lines) as its last
    statements."""
    first = node.body[0]
    indent = lines[first.lineno - 1][: first.col_offset]
    start = min([node.lineno] + [d.lineno for d in node.decorator_list])
    out = list(block)
    at = node.lineno - start
    out[at] = re.sub(_DEF.format(re.escape(node.name)), lambda m: m[1] + name, out[at], count=1)
    return out + [f"{indent}{line}" for line in check.split("\n")]


def _spaced(block: list[str], top: bool) -> list[str]:
    return ["", "", *block, "", ""] if top else ["", *block, ""]


def _rebuild(lines: list[str], dropped: set[int],
             inserts: dict[int, list[tuple[int, list[str]]]], rng: random.Random) -> str:
    """`lines` less `dropped`, with the blocks of `inserts` before their line (-1: the end of
    the module); where several meet, the deepest go first (a class's end comes before the next
    top-level definition), in random order among equals."""
    end = len(lines) - 1 if lines and lines[-1] == "" else len(lines)
    out = []
    for i in range(len(lines) + 1):
        here = inserts.get(i, []) + (inserts.get(-1, []) if i == end else [])
        rng.shuffle(here)
        for _, block in sorted(here, key=lambda x: -x[0]):  # stable: the shuffle stays
            out += block
        if i < len(lines) and i not in dropped:
            out.append(lines[i])
    return "\n".join(out)
