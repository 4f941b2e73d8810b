"""The issue text of a generated task, written from how its hidden tests fail.

It names the package, the public function involved and shows the failing call with the error
(`problem_statement.md`, a `str.format` template); it never names a test, a file:line, or
the fix. Test names, file locations and memory addresses are scrubbed from everything quoted.
"""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path, PurePosixPath

from swefleet.envs import safe_ast
from swefleet.envs.synth.failures import Failure, failure_blocks, header_of, parse_failure
from swefleet.envs.synth.mutators import Mutation
from swefleet.envs.synth.recipe import Recipe

TEMPLATE = Path(__file__).resolve().parent / "problem_statement.md"
MAX_EXAMPLES = 2
MAX_ERROR_LINES = 12
_ADDRESS = re.compile(r"\b0x[0-9a-fA-F]{4,}\b")
_FILE_LINE = re.compile(r"""(File "[^"]*", line \d+|\S+\.py:\d+|/testbed/\S*)""")
_TESTISH = re.compile(r"\b(test_\w+|Test\w+|\w+_test)\b")


class NoEvidence(ValueError):
    """The log holds no failure report for the broken tests: no statement can be written."""


def _public(qualname: str) -> str:
    """`Cache.__getitem__` -> `Cache`; `Cache._link.x` -> `Cache`: the name up to the first
    private or special part."""
    keep = []
    for part in qualname.split("."):
        if part.startswith("_"):
            break
        keep.append(part)
    return ".".join(keep)


def module_name(recipe: Recipe, path: str) -> str:
    rel = PurePosixPath(path)
    root = PurePosixPath(recipe.import_path)
    if str(root) != "." and rel.is_relative_to(root):
        rel = rel.relative_to(root)
    parts = list(rel.with_suffix("").parts)
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _qualname_at(source: str, line: int) -> str:
    """`Class.method` or `function` holding `line` (a function nested in a function is
    reported as its outer function: its name means nothing to a user)."""
    best: list[str] = []

    def walk(body, names):
        nonlocal best
        for node in body:
            scope = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            if scope and node.lineno <= line <= node.end_lineno:
                best = [*names, node.name]
                if isinstance(node, ast.ClassDef):
                    walk(node.body, best)

    walk(safe_ast.parse(source).body, [])
    return ".".join(best)


def _names_in(code: str) -> list[str]:
    return re.findall(r"[A-Za-z_]\w*", code)


def _function_of(failure: Failure, sources: dict[str, str], public: dict[str, str],
                 tests: set[str], module: str, buggy: str) -> str:
    """The package function a failing test called: the outermost public frame in the buggy
    module, else in other package code (helpers such as `raises` come last); with no package
    frame (a wrong value, checked in the test), `buggy` (the public function holding the bug),
    else a public package name in the failing statement."""
    frames = [f for f in failure.frames if f.path in sources]
    for frame in sorted(frames, key=lambda f: f.path != module):
        name = _public(_qualname_at(sources[frame.path], frame.line))
        if name:
            return name
    if buggy:
        return buggy
    for name in _names_in(failure.code_in(tests)):
        if name in public:
            return public[name]
    return ""


def public_names(sources: dict[str, str]) -> dict[str, str]:
    """Short name -> public qualified name, for the top-level functions and classes and the
    public methods of public classes of the package's sources (first definition wins)."""
    out: dict[str, str] = {}
    for path in sorted(sources):
        for node in safe_ast.parse(sources[path]).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                out.setdefault(node.name, node.name)
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                for sub in node.body:
                    if isinstance(sub, ast.FunctionDef) and not sub.name.startswith("_"):
                        out.setdefault(sub.name, f"{node.name}.{sub.name}")
    return out


def _scrub(text: str, hidden: set[str]) -> str:
    text = _ADDRESS.sub("0x...", text)
    text = _FILE_LINE.sub("...", text)
    for name in sorted(hidden, key=len, reverse=True):
        text = re.sub(rf"\b{re.escape(name)}\b", "...", text)
    return _TESTISH.sub("...", text)


def _error_text(failure: Failure, hidden: set[str]) -> str:
    lines = [line for i, line in enumerate(failure.error)
             if "Use -v to get" not in line and (i == 0 or line != failure.error[i - 1])]
    lines = lines[:MAX_ERROR_LINES] + (["..."] if len(lines) > MAX_ERROR_LINES else [])
    return _scrub("\n".join(line[:200] for line in lines), hidden).strip()


def _example(failure: Failure, hidden: set[str], tests: set[str], first: bool) -> str:
    error = _error_text(failure, hidden)
    printed = "\n".join(failure.captured[:MAX_ERROR_LINES]).strip()
    if printed and len(error.splitlines()) <= 1:  # a bare assert: what it printed says more
        error = f"{error}\n\n{_scrub(printed, hidden)}".strip()
    code = failure.code_in(tests)
    code = "" if set(_names_in(code)) & hidden else code
    code = "" if _TESTISH.search(code) else _scrub(code, hidden)
    if code:
        lead = "For example, this check fails:" if first else "This one fails too:"
        return f"{lead}\n\n```python\n{code}\n```\n\n```\n{error}\n```"
    lead = "It fails with:" if first else "Another call fails with:"
    return f"{lead}\n\n```\n{error}\n```"


def _wording(failures: list[Failure], func: str) -> tuple[str, str]:
    kinds = Counter(f.exc_type or "AssertionError" for f in failures)
    exc = kinds.most_common(1)[0][0]
    text = "\n".join("\n".join(f.error) for f in failures)
    if exc == "Failed" and "DID NOT RAISE" in text:
        return (f"`{func}` no longer raises an error for invalid input",
                f"`{func}` accepts input that it should reject: no exception is raised.")
    if exc in ("AssertionError", "Failed", ""):
        return (f"`{func}` returns a wrong result",
                f"`{func}` returns a wrong result for some inputs.")
    return (f"`{func}` raises {exc}",
            f"`{func}` raises `{exc}` for input that it should handle.")


def write_statement(
    recipe: Recipe,
    mutation: Mutation,
    log_text: str,
    failing: list[str],
    sources: dict[str, str],
) -> str:
    """The problem statement for a bug (`mutation`) whose failing tests are `failing`.

    `log_text`: the test log of the buggy state with the tests visible; `sources`: the
    package's source files (path -> text) as in the buggy state, to name the function that the
    tests called."""
    blocks = failure_blocks(log_text)
    failures = [parse_failure(header_of(t), blocks[header_of(t)])
                for t in failing if header_of(t) in blocks]
    failures = [f for f in failures if f.error]
    if not failures:
        raise NoEvidence(f"{mutation.path}: no failure report for {failing[:3]}")
    hidden = {header_of(t).split("[")[0].split(".")[-1] for t in failing}
    hidden |= {p for t in failing for p in header_of(t).split("[")[0].split(".")}
    public = public_names(sources)
    tests = {t.split("::")[0] for t in failing}
    text = sources.get(mutation.path, "")
    buggy = _public(_qualname_at(text, mutation.line)) if text else ""
    found = Counter(filter(None, (_function_of(f, sources, public, tests, mutation.path, buggy)
                                  for f in failures)))
    module = module_name(recipe, mutation.path)
    func = found.most_common(1)[0][0] if found else module
    title, opening = _wording(failures, func)
    examples: list[str] = []
    seen: set[str] = set()
    for failure in failures:
        key = _example(failure, hidden, tests, first=True)
        if key not in seen and len(examples) < MAX_EXAMPLES:
            seen.add(key)
            examples.append(_example(failure, hidden, tests, first=not examples))
    closing = (f"I expected the documented behaviour of `{func}` (module `{module}`); "
               "please make such calls work as documented.")
    return TEMPLATE.read_text().format(
        title=title, package=recipe.package, version=recipe.version, opening=opening,
        examples="\n\n".join(examples), closing=closing,
    ).strip() + "\n"
