"""The scripted expert's plan: what a good engineer would do to fix a task, read from its record.

From the task's own record (the gold patch, `synth.file` / `synth.function` when the task was
synthesised, else the file and the enclosing function of the patch's first changed line,
`bug_kind`, the task's test files and test command, the issue's `>>>` example) and the buggy
file as the sandbox holds it, `plan_demonstration` decides:

- the `ls` that finds the test files of the bug's area, and the test command for them
  (`python3 -m pytest -q -x FILES`);
- the issue's reproduction: its reproduction section (saved where the issue says and run), else
  a script replaying its `>>>` session (its statements, its expressions printed);
- the `grep` that finds the function, the `view` range around it;
- one `str_replace` per hunk of the gold patch: the hunk's changed lines, widened with the
  file's neighbouring lines until the text occurs exactly once;
- one sentence per edit saying what is wrong (from `bug_kind` and the changed tokens).

Never from FAIL_TO_PASS / PASS_TO_PASS or the test patch: the plan holds nothing the agent could
not have seen. `agents.expert_dialogue` turns the plan into the replies of an episode.
"""

from __future__ import annotations

import ast
import difflib
import re
import shlex
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from swefleet.envs import safe_ast
from swefleet.envs.synth.repro import (
    ATTACHED,
    SCRIPT_PATH,
    heredoc_delimiter,
    reproduction_in,
    save_and_run,
)

from swefleet.types import Task

if TYPE_CHECKING:
    from swefleet.agents.expert_guess import FirstGuess

MAX_VIEW_LINES = 80
"""A function longer than this is shown as a window of this many lines around the change."""
MAX_CONTEXT_LINES = 12
"""Lines of context a `str_replace` may take (before + after) to make its old text unique."""

SKIP_REASONS = ("no_patch", "not_python", "new_or_deleted_file", "not_utf8", "syntax_error",
                "patch_mismatch", "no_symbol", "ambiguous_edit")
"""Why a task gets no plan (`ExpertSkip.reason`), before any episode runs."""

KIND_WHY = {
    "flipped_comparison": "the comparison is the wrong way round",
    "off_by_one": "it is off by one",
    "wrong_operator": "it uses the wrong operator",
    "swapped_operands": "the operands are in the wrong order",
    "swapped_arguments": "the arguments are passed in the wrong order",
    "boolean_operator": "the boolean logic is wrong",
    "wrong_constant": "the constant is wrong",
    "wrong_call": "it calls the wrong function",
    "wrong_default": "the parameter's default is wrong",
}
_TOKEN = re.compile(r"""'(?:\\.|[^'\\])*'|"(?:\\.|[^"\\])*"|\w+|==|!=|<=|>=|//|\*\*|<<|>>|\S""")
_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_IDENT = re.compile(r"[A-Za-z_]\w*")
_EXAMPLE = re.compile(r"```(?:python|pycon|py)?\n(.*?)```", re.DOTALL)


class ReasonedError(Exception):
    """An error that carries a one-word `reason` (counted in the demonstrations' summary)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


class ExpertSkip(ReasonedError, ValueError):
    """The expert cannot write a demonstration for this task; `reason` is one of
    `SKIP_REASONS`."""


@dataclass
class Hunk:
    """One hunk of a unified diff: `lines` are (`' '` | `'-'` | `'+'`, text)."""

    path: str
    old_start: int
    old_count: int
    lines: list[tuple[str, str]]


@dataclass
class Edit:
    """One `str_replace`: `old` occurs exactly once in `path` (at line `line`) when it runs."""

    path: str
    old: str
    new: str
    line: int
    changed: int
    """The first changed line (an insertion: the line before it), 1-based."""
    why: str


@dataclass
class ExpertPlan:
    """Everything the expert's replies say and do, in order."""

    file: str
    function: str
    """Qualified name of the function that holds the bug; '' when the bug is at module level."""
    def_line: int
    grep: str
    """The command that finds the function (or the module-level name)."""
    test_command: str
    view_range: tuple[int, int]
    edits: list[Edit]
    reproduction: str = ""
    """Python script that reproduces the issue (its reproduction section, else its `>>>`
    example replayed); '' when the issue has neither."""
    reproduction_run: str = ""
    """The command that runs `reproduction` the first time."""
    reproduction_rerun: str = ""
    """The command that runs it again after the fix."""
    issue_subject: str = ""
    """The name the issue is about (`documented behaviour of X`), else the function's."""
    extra_views: list[tuple[str, tuple[int, int]]] = field(default_factory=list)
    """(path, range) of other files the patch changes, viewed before their edits."""
    test_listing: str = ""
    """The `ls` that shows the test files `test_command` runs (the agent is never told them);
    '' when it runs them all."""
    first_guess: FirstGuess | None = None
    """A wrong edit of the buggy line to try (and see fail) before the fix
    (`agents.expert_guess`); None: the fix straight away."""


def parse_hunks(patch: str) -> list[Hunk]:
    """The hunks of a unified diff, each with the path it changes (`b/` side)."""
    hunks: list[Hunk] = []
    lines = patch.splitlines()
    path, i = "", 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("+++ "):
            path = _strip_prefix(line[4:].split("\t")[0].strip())
        m = _HUNK.match(line)
        if m is None:
            i += 1
            continue
        old_left = int(m.group(2) if m.group(2) is not None else 1)
        new_left = int(m.group(4) if m.group(4) is not None else 1)
        hunk = Hunk(path, int(m.group(1)), old_left, [])
        i += 1
        while i < len(lines) and (old_left > 0 or new_left > 0):
            body = lines[i]
            tag, text = (body[:1] or " "), body[1:]
            if tag == "\\":  # "\ No newline at end of file"
                i += 1
                continue
            hunk.lines.append((tag, text))
            old_left -= tag in " -"
            new_left -= tag in " +"
            i += 1
        hunks.append(hunk)
    return hunks


def _strip_prefix(name: str) -> str:
    return name if name == "/dev/null" else name.split("/", 1)[1] if name[:2] in ("a/", "b/") else name


def plan_demonstration(task: Task, files: dict[str, bytes], repo_files: list[str]) -> ExpertPlan:
    """The expert's plan for `task`, from its record and the buggy `files` (path -> bytes, every
    file the gold patch changes, as the sandbox holds them). `repo_files`: the repository's
    tracked files (for the test files of a task that names none). Raises `ExpertSkip`."""
    hunks = parse_hunks(task.patch)
    if not hunks:
        raise ExpertSkip("no_patch", "the task has no gold patch hunks")
    paths = list(dict.fromkeys(h.path for h in hunks))
    if any(line in ("--- /dev/null", "+++ /dev/null") for line in task.patch.splitlines()):
        raise ExpertSkip("new_or_deleted_file", "the gold patch creates or deletes a file")
    if any(not p.endswith(".py") for p in paths):
        raise ExpertSkip("not_python", f"the gold patch changes {', '.join(paths)}")
    synth = task.model_extra.get("synth") if task.model_extra else None
    primary = synth["file"] if isinstance(synth, dict) and synth.get("file") in paths else paths[0]
    texts = {p: _text(p, files.get(p)) for p in paths}
    edits = _edits(hunks, texts, task)
    if not any(e.path == primary for e in edits):
        raise ExpertSkip("no_patch", f"the gold patch changes no line of {primary}")
    first_changed = min(e.changed for e in edits if e.path == primary)
    function, def_line, span = _function(texts[primary], primary, first_changed, synth)
    grep = _grep_command(primary, function, texts[primary], first_changed)
    tests = test_files(task, primary, repo_files)
    plan = ExpertPlan(
        file=primary, function=function, def_line=def_line, grep=grep,
        test_command=test_command(task, tests), test_listing=test_listing(tests),
        view_range=_view_range(span, first_changed, _last_changed(hunks, primary),
                               len(texts[primary].split("\n"))),
        edits=edits, issue_subject=_issue_subject(task.problem_statement) or function,
        **reproduction_commands(task.problem_statement),
    )
    for path in paths:
        if path != primary:
            line = min(e.changed for e in edits if e.path == path)
            total = len(texts[path].split("\n"))
            plan.extra_views.append((path, (max(1, line - 8), min(total, line + 8))))
    return plan


def _text(path: str, data: bytes | None) -> str:
    if data is None:
        raise ExpertSkip("patch_mismatch", f"{path} is not in the repository")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ExpertSkip("not_utf8", f"{path} is not UTF-8") from None


# ------------------------------------------------------------------------ edits


def _edits(hunks: list[Hunk], texts: dict[str, str], task: Task) -> list[Edit]:
    """One `str_replace` per hunk, applied in order to a copy of each file."""
    lines = {p: t.split("\n") for p, t in texts.items()}
    shift = dict.fromkeys(texts, 0)
    edits = []
    for hunk in hunks:
        tags = [tag for tag, _ in hunk.lines]
        if all(t == " " for t in tags):
            continue
        lo = min(i for i, t in enumerate(tags) if t != " ")
        hi = max(i for i, t in enumerate(tags) if t != " ")
        region = hunk.lines[lo : hi + 1]
        old = [text for tag, text in region if tag != "+"]
        new = [text for tag, text in region if tag != "-"]
        first = hunk.old_start if hunk.old_count == 0 else hunk.old_start - 1  # 0-based
        start = first + sum(t != "+" for t in tags[:lo]) + shift[hunk.path]
        current = lines[hunk.path]
        if current[start : start + len(old)] != old:
            raise ExpertSkip("patch_mismatch", f"{hunk.path}:{start + 1}: the gold hunk's lines "
                                               "differ from the file")
        before, after = _unique_context(current, start, len(old), hunk.path)
        a, b = start - before, start + len(old) + after
        edits.append(Edit(path=hunk.path, old="\n".join(current[a:b]),
                          new="\n".join(current[a:start] + new + current[start + len(old) : b]),
                          line=a + 1, changed=max(1, start + (1 if old else 0)),
                          why=_why(old, new, start, current, task)))
        current[start : start + len(old)] = new
        shift[hunk.path] += len(new) - len(old)
    return edits


def _unique_context(lines: list[str], start: int, n: int, path: str) -> tuple[int, int]:
    """Lines of context (before, after) that make lines[start - before : start + n + after]
    occur exactly once in the file, at that place."""
    text = "\n".join(lines)
    before, after = (0, 0) if n else ((1, 0) if start > 0 else (0, 1))
    while True:
        a, b = max(0, start - before), min(len(lines), start + n + after)
        old = "\n".join(lines[a:b])
        at = sum(len(line) + 1 for line in lines[:a])
        if old.strip() and _occurrences(text, old) == [at]:
            return start - a, b - start - n
        more_before, more_after = a > 0, b < len(lines)
        if before + after >= MAX_CONTEXT_LINES or not (more_before or more_after):
            break
        if more_before and (before <= after or not more_after):
            before += 1
        else:
            after += 1
    raise ExpertSkip("ambiguous_edit", f"{path}:{start + 1}: no unique old text within "
                                       f"{MAX_CONTEXT_LINES} lines of context")


def _occurrences(text: str, needle: str) -> list[int]:
    found, at = [], text.find(needle)
    while at != -1:
        found.append(at)
        at = text.find(needle, at + 1)
    return found


def _why(old: list[str], new: list[str], start: int, lines: list[str], task: Task) -> str:
    """One sentence on what is wrong at line `start + 1` (the old lines `old` of `lines` become
    `new`), from the changed lines and the task's `bug_kind`."""
    kind = task.model_extra.get("bug_kind", "") if task.model_extra else ""
    moved = [i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b]
    if sorted(old) == sorted(new) and len(moved) == 2:  # two lines exchanged
        first, second = moved
        return (f"Lines {start + first + 1} and {start + second + 1} are in the wrong order: "
                f"`{new[first].strip()}` has to come first.")
    removed = [x for x in old if x not in new]
    added = [x for x in new if x not in old]
    if [x.strip() for x in removed] == ["pass"] and added:
        at = start + old.index(removed[0])
        header = _header_above(lines, at)
        where = f"the `{header}` branch" if header else "the branch"
        body = [x.strip() for x in added if x.strip()]
        should = (f"it should do `{body[0]}`" if len(body) == 1 else
                  f"it needs its {len(body)} lines back, starting with `{body[0]}`")
        return f"On line {at + 1}, {where} does nothing (its body is just `pass`); {should}."
    if len(removed) == 1 and len(added) == 1 and removed[0].strip():
        was, should = changed_tokens(removed[0], added[0])
        why = KIND_WHY.get(kind, "that is the bug")
        return f"Line {start + old.index(removed[0]) + 1} has `{was}` where it needs `{should}`: {why}."
    shown = next((x.strip() for x in added if x.strip()), "")
    if not removed and shown:
        what = "A statement" if kind == "removed_statement" else "A case"
        return f"{what} is missing after line {start + max(0, len(old) // 2)}: it needs `{shown}`."

    return (f"Lines {start + 1}-{start + max(len(old), 1)} are wrong"
            + (f": they should start with `{shown}`." if shown else ": they should go."))


def _header_above(lines: list[str], at: int) -> str:
    """The statement that opens the block holding line `at` (0-based), shortened."""
    indent = len(lines[at]) - len(lines[at].lstrip())
    for line in reversed(lines[:at]):
        if line.strip() and len(line) - len(line.lstrip()) < indent:
            text = line.strip()
            return text if len(text) <= 60 else text[:57].rstrip() + "..."
    return ""


def changed_tokens(old: str, new: str) -> tuple[str, str]:
    """The smallest run of tokens that differs between two lines (widened by one token when a
    side would be empty), as (old text, new text): `<` and `>`; `not ok` and `ok`."""
    a, b = _tokens(old), _tokens(new)
    ops = [op for op in difflib.SequenceMatcher(a=[t for t, _, _ in a], b=[t for t, _, _ in b],
                                                autojunk=False).get_opcodes() if op[0] != "equal"]
    if not ops:
        return old.strip(), new.strip()
    i1, i2, j1, j2 = ops[0][1], ops[-1][2], ops[0][3], ops[-1][4]
    if i1 == i2 or j1 == j2:  # a token dropped or added: show the one after it too
        if i2 < len(a) and j2 < len(b):
            i2, j2 = i2 + 1, j2 + 1
        else:
            i1, j1 = max(0, i1 - 1), max(0, j1 - 1)
    was, should = _span(old, a, i1, i2), _span(new, b, j1, j2)
    for sep in (",", " "):  # a swap aligned off by a separator: `, a, b` -> `a, b`
        if was.startswith(sep) and should.startswith(sep):
            was, should = was[1:].lstrip(), should[1:].lstrip()
        if was.endswith(sep) and should.endswith(sep):
            was, should = was[:-1].rstrip(), should[:-1].rstrip()
    return was, should


def _tokens(line: str) -> list[tuple[str, int, int]]:
    return [(m.group(), m.start(), m.end()) for m in _TOKEN.finditer(line)]


def _span(line: str, tokens: list[tuple[str, int, int]], i: int, j: int) -> str:
    return line[tokens[i][1] : tokens[j - 1][2]] if j > i else ""


def _last_changed(hunks: list[Hunk], path: str) -> int:
    last = 0
    for h in hunks:
        if h.path == path:
            n = h.old_start - 1
            for tag, _ in h.lines:
                n += tag != "+"
                if tag != " ":
                    last = max(last, n)
    return last


# ------------------------------------------------------------------------ locating


def _function(text: str, path: str, line: int, synth) -> tuple[str, int, tuple[int, int] | None]:
    """(qualified name, def line, (first, last) line) of the function that holds the bug:
    `synth.function` when the task names it, else the innermost function around `line`;
    ('', 0, None) at module level."""
    try:
        tree = safe_ast.parse(text, path)
    except SyntaxError as exc:
        raise ExpertSkip("syntax_error", f"{path} does not parse: {exc}") from None
    defs = list(_defs(tree, ""))
    wanted = synth.get("function") if isinstance(synth, dict) else None
    for name, node in defs:
        if name == wanted:
            return name, node.lineno, (_first_line(node), node.end_lineno or node.lineno)
    around = [(n, d) for n, d in defs if isinstance(d, ast.FunctionDef | ast.AsyncFunctionDef)
              and _first_line(d) <= line <= (d.end_lineno or d.lineno)]
    if not around:
        return "", 0, None
    name, node = max(around, key=lambda nd: nd[1].lineno)
    return name, node.lineno, (_first_line(node), node.end_lineno or node.lineno)


def _defs(node: ast.AST, prefix: str):
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            name = f"{prefix}{child.name}"
            yield name, child
            yield from _defs(child, f"{name}.")
        else:
            yield from _defs(child, prefix)


def _first_line(node) -> int:
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])


def _grep_command(path: str, function: str, text: str, line: int) -> str:
    """`grep` for the function's `def` (for a special method, its class) in the package."""
    parts = function.split(".") if function else []
    if parts and parts[-1].startswith("__") and len(parts) > 1:
        pattern = f"class {parts[-2]}\\b"
    elif parts:
        pattern = f"def {parts[-1]}("
    else:
        names = _IDENT.findall(text.split("\n")[line - 1])
        if not names:
            raise ExpertSkip("no_symbol", f"{path}:{line}: no name to search for")
        pattern = names[0]
    root = _search_root(path)
    flags = "-rn" if root != path else "-n"
    return f"grep {flags} {shlex.quote(pattern)} {shlex.quote(root)}"


def _search_root(path: str) -> str:
    parts = PurePosixPath(path).parts
    if len(parts) == 1:
        return path
    return "/".join(parts[:2]) if parts[0] == "src" and len(parts) > 2 else parts[0]


def _view_range(span: tuple[int, int] | None, first: int, last: int, total: int) -> tuple[int, int]:
    if span is not None and span[1] - span[0] < MAX_VIEW_LINES:
        return span
    lo, hi = (span if span is not None else (1, total))
    mid = (first + last) // 2
    a = max(lo, min(mid - MAX_VIEW_LINES // 2, hi - MAX_VIEW_LINES + 1))
    if span is None:
        a, hi = max(1, first - 6), min(total, last + 6)
        return a, hi
    return a, min(hi, a + MAX_VIEW_LINES - 1)


# ------------------------------------------------------------------------ tests and issue


def test_files(task: Task, source: str, repo_files: list[str]) -> list[str]:
    """The task's test files, else the test files named after the module of `source` (as
    `envs.synth.recipe.Recipe.tests_for` maps them); [] for all."""
    return list(task.test_files) or _tests_named_after(source, repo_files)


def test_listing(files: list[str]) -> str:
    """`ls` of the folders that hold `files`: how an engineer who was not told the test files
    finds them ('' when there are none to find)."""
    folders = sorted({str(PurePosixPath(f).parent) for f in files})
    if not folders:
        return ""
    return " ".join(["ls", *(shlex.quote(f) for f in folders if f != ".")])


def test_command(task: Task, files: list[str]) -> str:
    """`python3 -m pytest -q -x` on `files` (`test_files`; [] for all), with the environment
    the task's own test command sets (`WCWIDTH_PYTHON=1 python3 -m pytest`: without it that
    package's tests refuse to run)."""
    options = " -o addopts=" if "-o addopts=" in task.test_cmd else ""
    command = f"python3 -m pytest -q -x{options} {' '.join(shlex.quote(f) for f in files)}"
    return " ".join([*_env_assignments(task.test_cmd), command]).rstrip()


def _env_assignments(test_cmd: str) -> list[str]:
    """The `NAME=VALUE` words a test command begins with (quoted again for the shell)."""
    try:
        words = shlex.split(test_cmd)
    except ValueError:
        return []
    assignments = []
    for word in words:
        name, eq, value = word.partition("=")
        if not eq or not name.isidentifier():
            break
        assignments.append(f"{name}={shlex.quote(value)}")
    return assignments


def _tests_named_after(source: str, repo_files: list[str]) -> list[str]:
    tests = [f for f in repo_files if f.endswith(".py") and PurePosixPath(f).name.startswith("test")]
    stem = PurePosixPath(source).stem
    if stem == "__init__":
        stem = PurePosixPath(source).parent.name
    return [t for t in tests if stem and stem in PurePosixPath(t).stem]


def reproduction_commands(statement: str) -> dict[str, str]:
    """`reproduction`, `reproduction_run` and `reproduction_rerun` of a plan: the issue's
    reproduction section saved where it says and run (run as it is when it came saved with the
    issue), else its `>>>` example fed to `python3 -` (both times)."""
    script = reproduction_in(statement)
    if script and ATTACHED in statement:  # saved with the issue: run it as it is
        return {"reproduction": script, "reproduction_run": f"python3 {SCRIPT_PATH}",
                "reproduction_rerun": f"python3 {SCRIPT_PATH}"}
    if script:
        return {"reproduction": script, "reproduction_run": save_and_run(script),
                "reproduction_rerun": f"python3 {SCRIPT_PATH}"}
    script = reproduction_script(statement)
    if not script:
        return {}
    command = python_heredoc(script)
    return {"reproduction": script, "reproduction_run": command, "reproduction_rerun": command}


def python_heredoc(script: str) -> str:
    delim = heredoc_delimiter(script)
    return f"python3 - <<'{delim}'\n{script}\n{delim}"


def reproduction_script(statement: str) -> str:
    """A script replaying the issue's `>>>` examples (expressions printed with `repr`, as the
    interpreter shows them); '' when the issue has none."""
    out: list[str] = []
    for block in _EXAMPLE.findall(statement):
        chunk: list[str] = []
        for line in block.splitlines() + [">>> "]:
            if line.startswith("... ") or line == "...":
                if chunk:
                    chunk.append(line[4:])
                continue
            if chunk:
                out.append(_as_statement("\n".join(chunk)))
                chunk = []
            if line.startswith(">>> ") and line[4:].strip():
                chunk = [line[4:]]
    shown = [s for s in out if s.startswith("print(")]
    return "\n".join(out) if shown else ""


def _as_statement(source: str) -> str:
    try:
        tree = safe_ast.parse(source)
    except SyntaxError:
        return f"# {source}"
    if len(tree.body) == 1 and isinstance(tree.body[0], ast.Expr):
        return f"print(repr({source}))"
    return source


def _issue_subject(statement: str) -> str:
    m = re.search(r"documented behaviour of `([^`]+)`", statement)
    return m.group(1) if m else ""


def issue_title(statement: str) -> str:
    """The issue's first line, when it is short enough to quote."""
    first = statement.strip().split("\n", 1)[0].strip().rstrip(".")
    return first if 0 < len(first) <= 90 else ""
