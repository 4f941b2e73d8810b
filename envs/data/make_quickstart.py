"""Generate the bundled quickstart task set (`quickstart/`) from the clean `textkit` project.

    .venv/bin/python envs/data/make_quickstart.py            # write bugs/ + tasks.jsonl, validate
    .venv/bin/python envs/data/make_quickstart.py --check    # only validate tasks.jsonl
    .venv/bin/swefleet tasks probes --tasks envs/data/quickstart/tasks.jsonl   # then: probes

Every task is one real bug injected into the clean project (`quickstart/repo`, the one copy of
the repository that all tasks share): `bugs/<name>.patch` (the task's `source_patch`, applied
when its image is built) injects the bug and removes the tests that decide the task or puts
back their old form; `patch` (gold) undoes the bug; `test_patch` brings the tests back.
FAIL_TO_PASS / PASS_TO_PASS are not written by hand: the real grader runs the task's test
files in Docker with the test patch applied, once on the buggy state and once with the gold
patch, and swebench's pytest parser names the tests (FAIL_TO_PASS: fail before, pass after;
PASS_TO_PASS: pass in both). Then every task is validated: gold patch -> resolved, empty patch
-> unresolved. Output is deterministic: running it twice writes the same files.
"""

from __future__ import annotations

import argparse
import asyncio
import difflib
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent
OUT = ROOT / "quickstart"
CLEAN = OUT / "repo"
sys.path.insert(0, str(ROOT.parent.parent))  # run as a script from anywhere

from swefleet.envs.grading import DockerGrader, grade_many
from swefleet.envs.images import DEFAULT_BASE_IMAGE
from swefleet.envs.tasks import load_tasks, prepare_task_images

from swefleet.types import GradeStatus, Task


@dataclass
class Bug:
    """One task: a source edit that injects the bug and the tests that decide it."""

    number: int
    kind: str
    split: str
    file: str
    good: str
    bad: str
    tests: dict[str, dict[str, str | None]]
    """test file -> {test function: its old form in the buggy repo, or None to remove it}."""
    issue: str
    created_at: str = field(default="")


BUGS = [
    Bug(
        1,
        "flipped_comparison",
        "train",
        "textkit/slug.py",
        good="    if max_length is not None and len(slug) > max_length:\n",
        bad="    if max_length is not None and len(slug) < max_length:\n",
        tests={
            "tests/test_slug.py": {
                "test_max_length_cuts_at_word_boundary": None,
                "test_max_length_keeps_short_slug": None,
                "test_max_length_single_long_word": None,
            }
        },
        issue="""\
slugify ignores max_length for long titles and chops words off short ones

When I pass `max_length` to `slugify`, long titles come back untouched while short ones lose
their last word:

```python
>>> from textkit import slugify
>>> slugify("The quick brown fox jumps", max_length=15)
'the-quick-brown-fox-jumps'
>>> slugify("Hello World", max_length=50)
'hello'
```

I expected the slug to be shortened only when it is longer than `max_length`, cut at a word
boundary as the docstring says: `'the-quick-brown'` for the first call and `'hello-world'` for
the second.
""",
    ),
    Bug(
        2,
        "off_by_one",
        "train",
        "textkit/wrap.py",
        good="        elif len(current) + 1 + len(word) <= width:\n",
        bad="        elif len(current) + 1 + len(word) < width:\n",
        tests={"tests/test_wrap.py": {"test_wrap_line_exactly_width": None}},
        issue="""\
wrap() breaks lines one character too early

A line that would be exactly `width` characters long is broken before its last word:

```python
>>> from textkit import wrap
>>> wrap("aaaa bbbbb cc", 10)
['aaaa', 'bbbbb cc']
```

"aaaa bbbbb" is 10 characters and fits in a width of 10, so I expected
`['aaaa bbbbb', 'cc']`. `fill()` has the same problem. The standard library's `textwrap` fills
lines up to and including the width.
""",
    ),
    Bug(
        3,
        "wrong_constant",
        "train",
        "textkit/duration.py",
        good='UNIT_SECONDS = {"w": 604800, "d": 86400, "h": 3600, "m": 60, "s": 1}\n',
        bad='UNIT_SECONDS = {"w": 604800, "d": 84600, "h": 3600, "m": 60, "s": 1}\n',
        tests={"tests/test_duration.py": {"test_parse_days": None, "test_format_days": None}},
        issue="""\
Durations with days are off by half an hour

```python
>>> from textkit import parse_duration, format_duration
>>> parse_duration("2d")
169200
>>> format_duration(86400)
'1d 30m'
```

A day has 86400 seconds, so I expected `172800` and `'1d'`. Weeks, hours, minutes and seconds
all look right, and a round trip through both functions hides the problem.
""",
    ),
    Bug(
        4,
        "removed_branch",
        "train",
        "textkit/ranges.py",
        good="        part = part.strip()\n        if not part:\n            continue\n",
        bad="        part = part.strip()\n",
        tests={
            "tests/test_ranges.py": {
                "test_parse_whitespace_and_empty_items": """\
def test_parse_whitespace_and_empty_items():
    assert parse_ranges(" 1 - 3 , 7 ") == [1, 2, 3, 7]
"""
            }
        },
        issue="""\
parse_ranges crashes on a trailing comma or an empty item

Page ranges pasted from a spreadsheet often end with a comma or contain a double comma:

```python
>>> from textkit import parse_ranges
>>> parse_ranges("1-3,")
Traceback (most recent call last):
  ...
ValueError: invalid literal for int() with base 10: ''
```

The docstring says empty items are ignored, so I expected `[1, 2, 3]`. The same happens for
`"4,,6"` (expected `[4, 6]`) and for an empty string (expected `[]`).
""",
    ),
    Bug(
        5,
        "off_by_one",
        "heldout",
        "textkit/wrap.py",
        good="    return text[: width - len(placeholder)].rstrip() + placeholder\n",
        bad="    return text[: width - len(placeholder) + 1].rstrip() + placeholder\n",
        tests={
            "tests/test_wrap.py": {
                "test_truncate_respects_width": None,
                "test_truncate_drops_trailing_space": None,
            }
        },
        issue="""\
truncate() returns strings longer than the requested width

```python
>>> from textkit import truncate
>>> s = truncate("abcdefghijkl", 8)
>>> s, len(s)
('abcdef...', 9)
>>> truncate("hello world", 9)
'hello w...'
```

The result should never be longer than `width`: `'abcde...'` and `'hello...'` here. We use it
to fit labels into fixed-width table cells and the extra character breaks the layout.
""",
    ),
    Bug(
        6,
        "removed_branch",
        "heldout",
        "textkit/ranges.py",
        good=(
            "        if first == last:\n            parts.append(str(first))\n"
            '        else:\n            parts.append(f"{first}-{last}")\n'
        ),
        bad='        parts.append(f"{first}-{last}")\n',
        tests={"tests/test_ranges.py": {"test_format_isolated_numbers": None}},
        issue="""\
format_ranges writes single numbers as "n-n"

```python
>>> from textkit import format_ranges
>>> format_ranges([1, 2, 3, 7])
'1-3,7-7'
>>> format_ranges([7])
'7-7'
```

A number that is not part of a run should be written on its own, `'1-3,7'`, as in the README.
`parse_ranges` reads both forms back, but the output is meant for people.
""",
    ),
    Bug(
        7,
        "wrong_pattern",
        "heldout",
        "textkit/case.py",
        good='_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")\n',
        bad='_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+|[0-9]+")\n',
        tests={
            "tests/test_case.py": {
                "test_snake_keeps_acronyms_together": None,
                "test_kebab": """\
def test_kebab():
    assert kebab_case("parseHttpResponse") == "parse-http-response"
""",
            }
        },
        issue="""\
snake_case and kebab_case mangle acronyms

```python
>>> from textkit import snake_case
>>> snake_case("HTMLParser")
'htmlp_arser'
>>> snake_case("parseHTTPResponse")
'parse_httpr_esponse'
```

An acronym should stay one word: `'html_parser'` and `'parse_http_response'` (the README has
this very example). `kebab_case` shows the same problem; names without acronyms work fine.
""",
    ),
]


# ---------------------------------------------------------------------------------------------
# Writing the bug patches


def unified_diff(path: str, old: str, new: str) -> str:
    """A git-style diff of one file (applies with `git apply` and `patch -p1`)."""
    body = difflib.unified_diff(
        old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{path}", f"b/{path}"
    )
    return f"diff --git a/{path} b/{path}\n" + "".join(body)


def rewrite_tests(text: str, changes: dict[str, str | None]) -> str:
    """Remove top-level test functions (None) or replace them with their old form.

    Top-level blocks are separated by two blank lines (the house style of the test files)."""
    blocks = text.split("\n\n\n")
    out = []
    for block in blocks:
        name = next((n for n in changes if f"def {n}(" in block), None)
        if name is None:
            out.append(block)
        elif changes[name] is not None:
            out.append(changes[name].rstrip("\n"))
    missing = [n for n in changes if not any(f"def {n}(" in b for b in blocks)]
    if missing:
        raise ValueError(f"tests not found: {missing}")
    return "\n\n\n".join(b.rstrip("\n") for b in out) + "\n"


def build_task(bug: Bug) -> dict:
    """Write `bugs/textkit-<n>.patch` (clean -> buggy, deciding tests removed or in their old
    form) and return the task record."""
    name = f"textkit-{bug.number}"
    clean_src = (CLEAN / bug.file).read_text()
    if clean_src.count(bug.good) != 1:
        raise ValueError(f"{name}: the good snippet must occur once in {bug.file}")
    buggy_src = clean_src.replace(bug.good, bug.bad)
    source_patch = unified_diff(bug.file, clean_src, buggy_src)
    test_patch = ""
    for test_file, changes in bug.tests.items():
        clean_tests = (CLEAN / test_file).read_text()
        old_tests = rewrite_tests(clean_tests, changes)
        source_patch += unified_diff(test_file, clean_tests, old_tests)
        test_patch += unified_diff(test_file, old_tests, clean_tests)
    (OUT / "bugs").mkdir(exist_ok=True)
    (OUT / "bugs" / f"{name}.patch").write_text(source_patch)
    return {
        "instance_id": f"textkit__textkit-{bug.number}",
        "repo": "textkit/textkit",
        "base_commit": "",
        "problem_statement": bug.issue,
        "hints_text": "",
        "created_at": f"2025-0{bug.number}-1{bug.number}T10:00:00Z",
        "version": "0.3",
        "environment_setup_commit": "",
        "patch": unified_diff(bug.file, buggy_src, clean_src),
        "test_patch": test_patch,
        "FAIL_TO_PASS": [],
        "PASS_TO_PASS": [],
        "source_dir": "repo",
        "source_patch": f"bugs/{name}.patch",
        "test_cmd": "python3 -m pytest -rA -p no:cacheprovider",
        "log_parser": "pytest",
        "split": bug.split,
        "bug_kind": bug.kind,
    }


# ---------------------------------------------------------------------------------------------
# Deriving and validating with the real grader


async def derive_test_lists(tasks: list[Task], grader: DockerGrader) -> None:
    """Fill FAIL_TO_PASS / PASS_TO_PASS from runs before and after the gold patch."""
    before = await grade_many(tasks, {t.instance_id: "" for t in tasks}, grader, concurrency=2)
    after = await grade_many(tasks, {t.instance_id: t.patch for t in tasks}, grader, concurrency=2)
    for task, b, a in zip(tasks, before, after):
        if not a.tests or not b.tests:
            raise RuntimeError(f"{task.instance_id}: no test results ({b.reason}; {a.reason})")
        truncated = [t for t in a.tests if t.count("[") != t.count("]")]
        if truncated:  # the pytest log parser splits on whitespace
            raise RuntimeError(f"{task.instance_id}: ids cut at a space: {truncated}")
        not_passing = [t for t, s in a.tests.items() if s != "PASSED"]
        if not_passing:
            raise RuntimeError(f"{task.instance_id}: fail with the gold patch: {not_passing}")
        task.FAIL_TO_PASS = [t for t in a.tests if b.tests.get(t) != "PASSED"]
        task.PASS_TO_PASS = [t for t in a.tests if b.tests.get(t) == "PASSED"]
        if not task.FAIL_TO_PASS or not task.PASS_TO_PASS:
            raise RuntimeError(f"{task.instance_id}: needs >= 1 FAIL_TO_PASS and PASS_TO_PASS")


async def validate(tasks: list[Task], grader: DockerGrader) -> bool:
    """Gold patch -> resolved and empty patch -> unresolved, for every task; prints a table."""
    gold = await grade_many(tasks, {t.instance_id: t.patch for t in tasks}, grader, concurrency=2)
    empty = await grade_many(tasks, {t.instance_id: "" for t in tasks}, grader, concurrency=2)
    ok = True
    for task, g, e in zip(tasks, gold, empty):
        good = g.status == GradeStatus.resolved and e.status == GradeStatus.unresolved
        ok &= good
        print(
            f"{task.instance_id:22} {task.split:8} F2P={len(task.FAIL_TO_PASS)} "
            f"P2P={len(task.PASS_TO_PASS):2}  gold={g.status} ({g.duration_s:.1f}s)  "
            f"empty={e.status} [{e.reason}]  {'OK' if good else 'FAIL'}"
        )
    return ok


def record_of(task: Task, record: dict) -> dict:
    return {**record, "FAIL_TO_PASS": task.FAIL_TO_PASS, "PASS_TO_PASS": task.PASS_TO_PASS}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only validate the existing tasks")
    ap.add_argument("--base-image", default=DEFAULT_BASE_IMAGE)
    args = ap.parse_args()
    tasks_file = OUT / "tasks.jsonl"
    grader = DockerGrader(run_id="make-quickstart", timeout_s=120)
    started = time.monotonic()
    if not args.check:
        records = [build_task(bug) for bug in BUGS]
        tasks_file.write_text("".join(json.dumps(r) + "\n" for r in records))
        tasks = prepare_task_images(load_tasks(tasks_file), tasks_file, args.base_image)
        asyncio.run(derive_test_lists(tasks, grader))
        records = [record_of(t, r) for t, r in zip(tasks, records)]
        tasks_file.write_text("".join(json.dumps(r) + "\n" for r in records))
    tasks = prepare_task_images(load_tasks(tasks_file), tasks_file, args.base_image)
    ok = asyncio.run(validate(tasks, grader))
    print(f"{len(tasks)} tasks {'valid' if ok else 'INVALID'} in {time.monotonic() - started:.0f}s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
