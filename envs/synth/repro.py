"""A runnable reproduction for a generated task: one hidden failing test, as a plain script.

A real bug report carries a reproducer; a small model needs one to see the bug and to check its
fix. `build_script` turns one deciding test into a script: the test module's imports and the
module-level helpers its body uses (transitively), then the body itself, dedented, without the
docstring and without the test's name. A test that needs fixtures or parameters, a method, a
decorated test, a helper that names a test, or a script longer than `MAX_LINES` gets none.

The script is kept only when it has been run (`envs.synth.repro_check`): it must exit non-zero
on the buggy code and zero once the gold patch is applied. What the issue then shows is one of
the tests that grade the task: the inputs and expected values of that test become visible, as in
SWE-bench issues that carry their test case; the other deciding tests, their twins and the
canaries stay hidden.
"""

from __future__ import annotations

import ast
import re
import textwrap

from swefleet.envs import safe_ast
from swefleet.envs.synth.hide import locate_test, split_test_id

MAX_LINES = 40
"""Longest script an issue may carry (lines); longer tests get no reproduction."""
MAX_CHARS = 2400
"""Longest script an issue may carry (characters)."""
SCRIPT_PATH = "/tmp/repro.py"
"""Where the issue asks the reproduction to be saved (outside the repository: no patch holds it)."""
SECTION = (f"To reproduce, save this script as `{SCRIPT_PATH}` and run `python3 {SCRIPT_PATH}` "
           "from the repository root; it exits with an error:")
"""The line that opens the reproduction section of an issue (the expert finds it by this)."""
ATTACHED = (f"This script is already saved as `{SCRIPT_PATH}`: run `python3 {SCRIPT_PATH}` from "
            "the repository root; it exits with an error:")
"""The same line when the script comes saved with the issue (`[agent] attach_reproduction`)."""


def heredoc_delimiter(text: str) -> str:
    """`EOF`, lengthened until no line of `text` equals it."""
    delim = "EOF"
    while delim in text.splitlines():
        delim += "_"
    return delim


def save_and_run(script: str) -> str:
    """The shell command that saves `script` where the issue says and runs it."""
    delim = heredoc_delimiter(script)
    return f"cat > {SCRIPT_PATH} <<'{delim}'\n{script.rstrip()}\n{delim}\npython3 {SCRIPT_PATH}"


def statement_with(statement: str, script: str) -> str:
    """`statement` with `script` as its reproduction section ('' : without one)."""
    return with_reproduction(statement, script) if script else without_reproduction(statement)
_TESTISH = re.compile(r"\b(test_\w+|Test\w+|\w+_test)\b")


def _loaded_names(nodes: list[ast.AST]) -> set[str]:
    """Names read by `nodes` (the roots of attribute chains included)."""
    out: set[str] = set()
    for node in nodes:
        for sub in ast.walk(node):
            if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Load):
                out.add(sub.id)
    return out


def _bound_names(node: ast.stmt) -> set[str]:
    """Names a module-level statement binds."""
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return set()


def _segment(lines: list[str], node: ast.stmt) -> str:
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    return "\n".join(lines[first - 1: node.end_lineno])


def _import_of(node: ast.Import | ast.ImportFrom, names: set[str]) -> str:
    """`node` reduced to the aliases that bind `names`."""
    kept = [a for a in node.names if (a.asname or a.name).split(".")[0] in names]
    if isinstance(node, ast.Import):
        return ast.unparse(ast.Import(names=kept))
    return ast.unparse(ast.ImportFrom(module=node.module, names=kept, level=node.level))


def _prelude(source: str, used: set[str], local: dict[str, str], depth: int = 0
             ) -> list[str] | None:
    """Code that binds the `used` names as the test module binds them, in file order:
    its imports (reduced to the used names), and its helpers (transitively); what it imports
    from a test-local module in `local` (module name -> source) is inlined from there. None
    when a needed statement is a test, a fixture or a `*` import."""
    module = safe_ast.parse(source)
    lines = source.splitlines()
    binders = [(node, _bound_names(node)) for node in module.body]
    wanted: dict[int, set[str]] = {}
    todo, seen = set(used), set()
    while todo:
        name = todo.pop()
        seen.add(name)
        for i, (node, bound) in enumerate(binders):
            if name not in bound:
                continue
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                if getattr(node, "decorator_list", None) or _TESTISH.search(name):
                    return None
                if i not in wanted:
                    todo |= _loaded_names([node]) - seen
            wanted.setdefault(i, set()).add(name)
    out: list[str] = []
    for i in sorted(wanted):
        node, names = binders[i][0], wanted[i]
        if isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names):
            return None
        if isinstance(node, ast.ImportFrom) and (node.module or "") in local and depth < 3:
            pieces = _inlined(node, names, local, depth)
            if pieces is None:
                return None
            out += pieces
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            out.append(_import_of(node, names))
        else:
            out.append(_segment(lines, node))
    return out


def _inlined(node: ast.ImportFrom, names: set[str], local: dict[str, str], depth: int
             ) -> list[str] | None:
    """The definitions of `names`, imported by `node` from a test-local module, as code."""
    by_alias = {(a.asname or a.name): a.name for a in node.names}
    originals = {by_alias[n] for n in names}
    pieces = _prelude(local[node.module or ""], originals, local, depth + 1)
    if pieces is None:
        return None
    renames = [f"{alias} = {name}" for alias, name in by_alias.items()
               if alias in names and alias != name]
    return pieces + renames


def imported_modules(source: str) -> list[str]:
    """Names of the modules `source` imports from with a plain `from NAME import ...` (one
    part, no dots): the candidates for test-local helper modules."""
    out = []
    for node in safe_ast.parse(source).body:
        if isinstance(node, ast.ImportFrom) and node.module and "." not in node.module \
                and node.level == 0:
            out.append(node.module)
    return list(dict.fromkeys(out))


def _body_source(source: str, func: ast.FunctionDef) -> str:
    """The body of a test without arguments, comments kept, docstring dropped, dedented."""
    body = list(func.body)
    start = func.lineno + 1  # a test without arguments has a one-line signature
    first = body[0]
    if isinstance(first, ast.Expr) and isinstance(getattr(first, "value", None), ast.Constant) \
            and isinstance(first.value.value, str):
        body = body[1:]
        start = first.end_lineno + 1
    if not body:
        return ""
    lines = source.splitlines()[start - 1: body[-1].end_lineno]
    return textwrap.dedent("\n".join(lines)).strip("\n")


def _layout(prelude: list[str], body: str) -> str:
    """Imports first, then the helpers (a blank line between), then the body."""
    pieces = list(dict.fromkeys(p for p in prelude if p.strip()))
    imports = [p for p in pieces if p.startswith(("import ", "from "))]
    helpers = [p for p in pieces if p not in imports]
    blocks = ["\n".join(imports)] if imports else []
    blocks += helpers + [body]
    return "\n\n".join(blocks) + "\n"


def build_script(sources: dict[str, str], test_id: str, local: dict[str, str] | None = None
                 ) -> str:
    """The reproduction script of `test_id` from the test files `sources` (path -> text, the
    tests visible); '' when that test cannot be made one (see the module docstring). What the
    test module imports from a module of `local` (name -> source, e.g. the test directory's
    `common.py`) is inlined. A method may use `self` only for `unittest`'s assertions: its
    script runs them on a bare `TestCase`; one that needs more of its class fails the check
    run."""
    hit = locate_test(sources, test_id)
    if hit is None:
        return ""
    path, func = hit
    method = bool(split_test_id(test_id)[1])
    params = func.args.args[1:] if method and func.args.args else func.args.args
    if not isinstance(func, ast.FunctionDef) or func.decorator_list or params \
            or func.args.vararg or func.args.kwonlyargs:
        return ""
    source = sources[path]
    body = _body_source(source, func)
    uses_self = "self" in _loaded_names(func.body)
    if not body or "yield" in body or (uses_self and not method) or "case" in _loaded_names(
            func.body):
        return ""
    prelude = _prelude(source, _loaded_names(func.body) - {"self"}, local or {})
    if prelude is None:
        return ""
    if uses_self:
        prelude.append("import unittest")
        body = "case = unittest.TestCase()\n" + re.sub(r"\bself\b", "case", body)
    script = _layout(prelude, body)
    too_long = len(script) > MAX_CHARS or script.count("\n") > MAX_LINES
    if too_long or _TESTISH.search(script.replace("unittest.TestCase", "")):
        return ""
    try:
        safe_ast.parse(script)
    except SyntaxError:
        return ""
    return script


def with_reproduction(statement: str, script: str) -> str:
    """`statement` with a reproduction section before its closing paragraph (replacing one it
    already has)."""
    statement = without_reproduction(statement).rstrip("\n")
    head, sep, closing = statement.rpartition("\n\n")
    section = f"{SECTION}\n\n```python\n{script.rstrip()}\n```"
    if not sep:
        return f"{statement}\n\n{section}\n"
    return f"{head}\n\n{section}\n\n{closing}\n"


def attached(statement: str) -> tuple[str, str]:
    """`(statement, script)` for an issue whose reproduction comes saved at `SCRIPT_PATH`: its
    section says so instead of asking for the script to be saved; `(statement, '')` when it has
    no reproduction section."""
    script = reproduction_in(statement)
    if not script or SECTION not in statement:
        return statement, script
    return statement.replace(SECTION, ATTACHED, 1), script


def _section_start(statement: str) -> int:
    found = [i for i in (statement.find(SECTION), statement.find(ATTACHED)) if i >= 0]
    return min(found, default=-1)


def without_reproduction(statement: str) -> str:
    """`statement` without its reproduction section, if it has one."""
    start = _section_start(statement)
    if start < 0:
        return statement
    end = statement.find("```", statement.find("```python", start) + 9)
    return statement[:start].rstrip("\n") + "\n\n" + statement[end + 3:].lstrip("\n")


def reproduction_in(statement: str) -> str:
    """The script of the statement's reproduction section; '' when it has none."""
    start = _section_start(statement)
    if start < 0:
        return ""
    m = re.compile(r"```python\n(.*?)```", re.DOTALL).search(statement, start)
    return m.group(1) if m else ""
