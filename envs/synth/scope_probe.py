"""Behaviour probes in a deciding test's own scope: calls on the objects the test built.

The standalone probes (`behaviour_run.py`) replay calls whose arguments and objects are plain
literals; a test that builds its object from another object, a function or a storage class
has none. Its own scope has them, at the end of its body: a call the test's assertions make
(`cache.get(3)`, `parse(sql)[0].value`), evaluated again after the body, with one literal
argument nudged (`cache.get(4)`) so that its value is not the one the assertion spells out
(`scope_candidates.py` says which expressions are candidates).

`recording_file` writes, for each candidate call of each deciding function (and, once a gold
run has shown which of them give a value, for the tuple of those: `combined`), a copy of the
function (`test_sfrec_<n>`, same decorators and fixtures) in which every assertion is kept but
cannot fail (its expression still runs, in order) and whose last statements record the
`repr` of the candidate, or null when it raised. A set of strings (whose `repr` follows the
hash seed) is recorded as its sorted list, and a candidate whose every value was one becomes
`sorted(<candidate>)` (`sorted_candidates`). That file runs in the task's sandbox with the
gold code (under the hash seeds `behaviour_run.gold_seeds` names), the base code and each
mutant (`behaviour_run.py`);
`candidates_for_pick` turns the values into the candidates `behaviour.pick` chooses from
(the twins' values: what mutants return, else the gold value nudged, `decoys`). The
chosen check is appended to the copy (and the twins) of the real test when grading
(`ProbeCall.scope`): the same body runs before it, with its assertions real.
"""

from __future__ import annotations

import ast
import copy
import inspect
import json
import re

from swefleet.envs import safe_ast
from swefleet.envs.canary_twins import find_function
from swefleet.envs.synth.call_values import ADDRESS, MAX_REPR, fixed_hash, hash_ordered
from swefleet.envs.synth.scope_candidates import MAX_INLINED, candidate_calls, is_unittest_assert
from swefleet.envs.synth.scope_params import assertion_helpers, module_values, parameter_sets

REC_PREFIX = "test_sfrec_"
"""Name prefix of the recording copies (selected with `-k sfrec`)."""
_LEADING_ZERO = re.compile(r"(?<![\w.])0\d")


class _SoftAsserts(ast.NodeTransformer):
    """Every assertion runs its expression but cannot fail the test."""

    def visit_Assert(self, node: ast.Assert):
        return _try_pass(ast.Expr(node.test), node)

    def visit_Expr(self, node: ast.Expr):
        if isinstance(node.value, ast.Call) and is_unittest_assert(node.value):
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


SORTED_MARK = "\x00sorted:"
"""Starts a recorded value that is a set of strings, given as its sorted list (`recorded_text`)."""


def recorded_text(value) -> str | None:
    """What a recording copy writes for a candidate's value: a set or frozenset of strings (or
    of bytes) as `SORTED_MARK` + the `repr` of its sorted list; None for another value holding
    a set whose order may change from run to run (`call_values.hash_ordered`); else its
    `repr`. (Copied into the recorded test file: the marker is spelled out.)"""
    if isinstance(value, (set, frozenset)) and (all(isinstance(x, str) for x in value)
                                                or all(isinstance(x, bytes) for x in value)):
        return "\x00sorted:" + repr(sorted(value))
    return None if hash_ordered(value) else repr(value)


def _helper_source() -> str:
    """`call_values.fixed_hash`, `hash_ordered` and `recorded_text`, as the recording copies
    call them (`_sfrec_fixed_hash`, ...), appended to the recorded test file."""
    source = "\n\n".join(inspect.getsource(f) for f in (fixed_hash, hash_ordered, recorded_text))
    return re.sub(r"\b(fixed_hash|hash_ordered|recorded_text)\b", r"_sfrec_\1", source)


def _record_lines(key: str, expr: str, out_path: str) -> list[str]:
    """Record `expr`'s value (`recorded_text`): None when it raises, holds a set whose order
    may change from run to run and is no set of strings, or gives another value when evaluated
    again (it depends on state it changes, such as the random generator's)."""
    return ["try:", f"    _sfrec_v = _sfrec_recorded_text(({expr}))",
            f"    if _sfrec_v is not None and _sfrec_recorded_text(({expr})) != _sfrec_v:",
            "        _sfrec_v = None",
            "except BaseException:", "    _sfrec_v = None",
            f"with open({out_path!r}, 'a') as _sfrec_f:",
            f"    _sfrec_f.write(__import__('json').dumps([{key!r}, _sfrec_v]) + '\\n')"]


def function_candidates(text: str, tests: list[str]) -> dict[str, list[str]]:
    """`candidate_calls` of the function of each of `tests` (ids `path::[Class::]name[params]`)
    found in `text`, keyed by function id; a parametrized one's with its parameter sets bound,
    the sets of `tests` first."""
    tree = safe_ast.parse(text)
    wanted: dict[str, set[str]] = {}
    for test in tests:
        func, _, params = test.partition("[")
        wanted.setdefault(func, set()).update([params[:-1]] if params else [])
    values, helpers = module_values(tree), assertion_helpers(tree)
    out = {}
    for func, ids in wanted.items():
        hit = find_function(tree, func.split("::")[1:])
        if hit is not None:
            sets = [env for env in parameter_sets(hit[0], values, frozenset(ids))
                    if all(len(ast.unparse(v)) <= MAX_INLINED for v in env.values())]
            out[func] = candidate_calls(hit[0], sets, helpers)
    return out


def combined(runs: list[dict[str, str | None]], keys: dict[str, tuple[str, str]]
             ) -> dict[str, str]:
    """Per function, a tuple of its candidates that gave the same value in every gold run of
    `runs`, when there are two or more: one check over several calls has more values than any
    one of them (a call that returns a bool has two)."""
    by_function: dict[str, list[str]] = {}
    for key, (func, expr) in keys.items():
        values = {run.get(key) for run in runs}
        value = values.pop() if len(values) == 1 else None
        if value is not None and not value.startswith(SORTED_MARK):
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
            indent = lines[node.lineno - 1][:node.col_offset]  # tabs stay tabs
            inserts.append((node.end_lineno, _copy_lines(node, f"{REC_PREFIX}{key}", key, expr,
                                                         out_path, indent)))
    for at, block in sorted(inserts, key=lambda x: -x[0]):
        lines[at:at] = block
    if keys:
        lines += ["", "", _helper_source()]
    return "\n".join(lines), keys


def _copy_lines(node, name: str, key: str, expr: str, out_path: str, indent: str) -> list[str]:
    soft = copy.deepcopy(node)
    soft.body = [_SoftAsserts().visit(stmt) for stmt in soft.body]
    soft.name = name
    soft.body = soft.body + safe_ast.parse("\n".join(_record_lines(key, expr, out_path))).body
    ast.fix_missing_locations(soft)
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


def sorted_candidates(keys: dict[str, tuple[str, str]], runs: list[dict[str, str | None]]
                      ) -> tuple[dict[str, tuple[str, str]], list[dict[str, str | None]]]:
    """`keys` and `runs` (each run's values) with the sets of strings resolved: a candidate
    whose every value (in every run that gave one) was a set of strings becomes
    `sorted(<candidate>)`, its values the sorted lists; one that was a set of strings in some
    runs and something else in others gives no value in any (`sorted` of a list or a string
    would make values the runs never showed)."""
    keys = dict(keys)
    runs = [dict(run) for run in runs]
    for key, (func, expr) in list(keys.items()):
        values = [run[key] for run in runs if run.get(key) is not None]
        marked = [v.startswith(SORTED_MARK) for v in values]
        if not any(marked):
            continue
        keep = all(marked)
        if keep:
            keys[key] = (func, f"sorted({expr})")
        for run in runs:
            if run.get(key) is not None:
                run[key] = run[key][len(SORTED_MARK):] if keep else None
    return keys, runs


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
