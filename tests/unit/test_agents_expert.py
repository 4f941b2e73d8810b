"""The scripted expert: its plan from a task record (edits unique, the view around the function,
the test command, the issue's example, never the hidden tests), replies that parse in both
scaffolds' formats, a whole episode through the real loop on a local repository that ends with
the gold fix, and the count of tasks it drops, with their reasons."""

from __future__ import annotations

import json
import os
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from swefleet.agents.config import AgentConfig
from swefleet.agents.expert import (
    ExpertSkip,
    changed_tokens,
    parse_hunks,
    plan_demonstration,
    reproduction_commands,
    reproduction_script,
)
from swefleet.agents.expert_dialogue import ExpertAbort, expert_steps, render_step
from swefleet.agents.expert_run import expert_demonstrations, summary
from swefleet.agents.scaffolds import BashScaffold, ToolScaffold
from swefleet.envs.synth.repro import reproduction_in, with_reproduction, without_reproduction
from swefleet.envs.tasks import load_tasks

from swefleet.types import EpisodeStatus, GradeCause, GradeResult, GradeStatus, Task

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ holds shared helpers
from local_sandbox import LocalShellSandbox

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]

CALC = '''"""Small arithmetic helpers."""


def clamp(x, lo, hi):
    """`x` limited to [lo, hi]."""
    if x < lo:
        return lo
    if x < hi:
        return hi
    return x


def total(xs):
    result = 0
    for x in xs:
        result -= x
    return result
'''
GOLD = """diff --git a/calc/core.py b/calc/core.py
--- a/calc/core.py
+++ b/calc/core.py
@@ -5,7 +5,7 @@ def clamp(x, lo, hi):
     \"\"\"`x` limited to [lo, hi].\"\"\"
     if x < lo:
         return lo
-    if x < hi:
+    if x > hi:
         return hi
     return x
 
@@ -13,5 +13,5 @@ def clamp(x, lo, hi):
 def total(xs):
     result = 0
     for x in xs:
-        result -= x
+        result += x
     return result
"""
TESTS = "from calc.core import clamp\n\n\ndef test_clamp_low():\n    assert clamp(-1, 0, 5) == 0\n"
STATEMENT = """clamp() returns hi for values inside the range

```python
>>> from calc.core import clamp, total
>>> clamp(3, 0, 5)
5
>>> total([1, 2])
-3
```
"""


def _task(**extra) -> Task:
    return Task.model_validate({
        "instance_id": "calc__calc-1", "repo": "calc/calc", "problem_statement": STATEMENT,
        "patch": GOLD, "bug_kind": "flipped_comparison",
        "FAIL_TO_PASS": ["tests/test_core.py::test_clamp_secret_hidden"], **extra})


def _files(text: str = CALC) -> dict[str, bytes]:
    return {"calc/core.py": text.encode()}


REPO_FILES = ["calc/__init__.py", "calc/core.py", "tests/test_core.py", "tests/test_other.py"]


# ---------------------------------------------------------------- the plan


def test_plan_edits_each_hunk_with_unique_old_text_and_reads_the_record():
    plan = plan_demonstration(_task(), _files(), REPO_FILES)
    assert [(e.old, e.new) for e in plan.edits] == [
        ("    if x < hi:", "    if x > hi:"), ("        result -= x", "        result += x")]
    assert plan.edits[0].why == ("Line 8 has `<` where it needs `>`: the comparison is the wrong "
                                 "way round.")
    assert (plan.function, plan.def_line, plan.view_range) == ("clamp", 4, (4, 10))
    assert plan.grep == "grep -rn 'def clamp(' calc"
    assert plan.test_command == "python3 -m pytest -q -x tests/test_core.py"  # named after core
    assert plan.reproduction == ("from calc.core import clamp, total\nprint(repr(clamp(3, 0, 5)))\n"
                                 "print(repr(total([1, 2])))")
    text = json.dumps(plan.__dict__, default=str)
    assert "test_clamp_secret_hidden" not in text  # nothing from FAIL_TO_PASS


def test_plan_prefers_the_synth_record_and_the_task_test_files():
    task = _task(synth={"file": "calc/core.py", "function": "total", "seed": 0},
                 test_files=["tests/test_other.py"],
                 test_cmd="WCWIDTH_PYTHON=1 PYTHONHASHSEED=0 python3 -m pytest -rA -o addopts= "
                          "--color=no")
    plan = plan_demonstration(task, _files(), [])
    assert (plan.function, plan.def_line, plan.view_range) == ("total", 13, (13, 17))
    assert plan.test_command == ("WCWIDTH_PYTHON=1 PYTHONHASHSEED=0 python3 -m pytest -q -x "
                                 "-o addopts= tests/test_other.py")  # the task's environment


def test_an_old_text_that_repeats_takes_context_until_it_is_unique():
    doubled = CALC.replace("    return x\n", "    if x < hi:\n        pass\n    return x\n")
    patch = GOLD.split("@@ -13,5")[0]
    plan = plan_demonstration(_task(patch=patch), _files(doubled), REPO_FILES)
    (edit,) = plan.edits
    assert edit.old == "        return lo\n    if x < hi:" and edit.line == 7
    assert doubled.count(edit.old) == 1


def test_a_hunk_that_cannot_be_made_unique_is_skipped_with_its_reason():
    block = "x = 1\n" * 30  # every window of up to 12 lines of context repeats
    patch = "--- a/calc/core.py\n+++ b/calc/core.py\n@@ -15,1 +15,1 @@\n-x = 1\n+x = 2\n"
    with pytest.raises(ExpertSkip) as err:
        plan_demonstration(_task(patch=patch), _files(block), REPO_FILES)
    assert err.value.reason == "ambiguous_edit"
    with pytest.raises(ExpertSkip) as err:
        plan_demonstration(_task(patch=GOLD.replace("result -= x", "result *= x")), _files(),
                           REPO_FILES)
    assert err.value.reason == "patch_mismatch"


def test_bundled_patches_parse_and_removed_branches_are_explained():
    for path in ("envs/data/quickstart/tasks.jsonl", "envs/data/pypi/tasks.jsonl"):
        for task in load_tasks(REPO / path):
            hunks = parse_hunks(task.patch)
            assert hunks and all(h.path.endswith(".py") for h in hunks), task.instance_id
            assert all(any(tag != " " for tag, _ in h.lines) for h in hunks)
    body = "def f(n):\n    if n > 1:\n        pass\n    return n\n"
    patch = "--- a/m.py\n+++ b/m.py\n@@ -3,1 +3,1 @@\n-        pass\n+        return 0\n"
    task = Task(instance_id="m-1", repo="m/m", problem_statement="f", patch=patch)
    plan = plan_demonstration(task, {"m.py": body.encode()}, [])
    assert plan.edits[0].why == ("On line 3, the `if n > 1:` branch does nothing (its body is "
                                 "just `pass`); it should do `return 0`.")
    assert plan.edits[0].old == "        pass"  # unique as it is


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("    if a < b:", "    if a > b:", ("<", ">")),
    ("    return f(x, y)", "    return f(y, x)", ("x, y", "y, x")),
    ("    if not ok and done:", "    if ok and done:", ("not ok", "ok")),
    ("    return a + b", "    return a + b + 1", ("b", "b + 1")),
    ('    sep = "-"', '    sep = "_"', ('"-"', '"_"')),
])
def test_changed_tokens(old, new, expected):
    assert changed_tokens(old, new) == expected


def test_the_quickstart_issues_give_runnable_examples():
    for task in load_tasks(REPO / "envs/data/quickstart/tasks.jsonl"):
        script = reproduction_script(task.problem_statement)
        assert script.startswith("from textkit import") and "print(repr(" in script, script
        compile(script, task.instance_id, "exec")
    assert reproduction_script("no example here") == ""


# ---------------------------------------------------------------- the replies


def _observation(step, fixed: bool) -> str:
    if step.tool == "bash" and step.arguments["command"].startswith("ls "):
        return "<tool_response>\n<returncode>0</returncode>\n<output>\ntest_core.py\ntest_other.py\n"
    if step.tool == "bash" and "pytest" in step.arguments["command"]:
        return "<tool_response>\n<returncode>0</returncode>\n<output>\n3 passed in 0.1s\n</output>"
    if step.tool == "str_replace":
        return "<tool_response>\nEdited calc/core.py. Lines 1-3 of 18 now read:\n..."
    if step.tool == "bash" and "grep" in step.arguments["command"]:
        return "<returncode>0</returncode>\n<output>\ncalc/core.py:4:def clamp(x, lo, hi):\n"
    return "<tool_response>\n<returncode>0</returncode>\n<output>\n5\n-3\n</output>"


def _steps(plan, task):
    dialogue, steps, obs = expert_steps(plan, task), [], None
    while True:
        try:
            step = next(dialogue) if obs is None else dialogue.send(obs)
        except StopIteration:
            return steps
        steps.append(step)
        obs = _observation(step, fixed=len(steps) > 6)


def test_replies_parse_in_both_scaffolds_in_the_workflow_order():
    task = _task()
    plan = plan_demonstration(task, _files(), REPO_FILES)
    steps = _steps(plan, task)
    tools = ToolScaffold(AgentConfig(scaffold="tools"))
    bash = BashScaffold(AgentConfig())
    actions = [tools.parse_action(render_step(s, "tools"), "stop") for s in steps]
    assert [a.tool for a in actions] == ["bash", "bash", "bash", "bash", "view", "str_replace",
                                         "str_replace", "bash", "bash", "submit"]
    assert actions[0].command == plan.test_listing == "ls tests"  # never told the test files
    assert actions[1].command == actions[-2].command == plan.test_command
    assert actions[4].arguments == {"path": "calc/core.py", "view_range": [4, 10]}
    for step in steps:
        text = render_step(step, "bash")
        assert "```bash" in text and bash.parse_action(text, "stop").command
    assert steps[0].thought.startswith("The issue: clamp() returns hi for values inside the "
                                       "range. First I look for the tests")
    assert steps[1].thought.startswith("The tests of `core` are there; I run them")
    assert steps[2].thought.startswith("All 3 tests pass, so they do not cover")
    assert steps[-1].thought == "All 3 tests pass. The fix is done, so I submit."


def test_tests_that_fail_after_the_fix_abort_the_demonstration():
    task = _task()
    dialogue = expert_steps(plan_demonstration(task, _files(), REPO_FILES), task)
    step = next(dialogue)
    for _ in range(8):
        step = dialogue.send(_observation(step, fixed=False))
    assert step.tool == "bash" and "pytest" in step.arguments["command"]
    with pytest.raises(ExpertAbort) as err:
        dialogue.send("<returncode>1</returncode>\n<output>\nE   assert 5 == 3\n1 failed\n")
    assert err.value.reason == "tests_fail_after_fix"


# ---------------------------------------------------------------- whole episodes


class _LocalFarm:
    def __init__(self, root: Path, files: dict[str, str]) -> None:
        self.root, self.files, self.n = root, files, 0

    @asynccontextmanager
    async def acquire(self, task):
        self.n += 1
        yield LocalShellSandbox.create(self.root / f"{task.instance_id}-{self.n}", self.files)


class _PatchGrader:
    """Resolved when the patch holds both fixed lines (a deterministic fake of the grader)."""

    async def grade(self, task, patch):
        ok = all(line in patch for line in ("+    if x > hi:", "+        result += x"))
        status = GradeStatus.resolved if ok else GradeStatus.unresolved
        return GradeResult(instance_id=task.instance_id, status=status, cause=GradeCause.tests)


@pytest.mark.parametrize("scaffold", ["tools", "bash"])
async def test_expert_episodes_through_the_loop_are_kept_or_counted(tok, tmp_path, monkeypatch,
                                                                    scaffold):
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    files = {"calc/__init__.py": "", "calc/core.py": CALC, "tests/test_core.py": TESTS}
    ambiguous = "--- a/calc/__init__.py\n+++ b/calc/__init__.py\n@@ -1,0 +1,1 @@\n+x = 1\n"
    tasks = [_task(), _task(instance_id="calc__calc-2", patch=ambiguous)]
    agent = AgentConfig(scaffold=scaffold, max_steps=3, max_tokens_per_turn=200,
                        context_budget_tokens=16384, command_timeout_s=30)
    demos = await expert_demonstrations(tasks, _LocalFarm(tmp_path, files), _PatchGrader(),
                                        tok, agent)
    kept, dropped = demos
    assert kept.kept and kept.trajectory.status == EpisodeStatus.resolved
    assert kept.trajectory.reward == 1.0 and len(kept.trajectory.turns) == 10
    assert (dropped.kept, dropped.reason) == (False, "ambiguous_edit")  # an empty file
    assert dropped.trajectory is None  # skipped before any episode
    info = summary(demos)
    assert (info["kept"], info["dropped"], info["reasons"]) == (1, 1, {"ambiguous_edit": 1})
    turns = kept.trajectory.turns[1:]  # after the listing of the test folder
    assert "test_core.py" in kept.trajectory.turns[0].observation
    assert "1 passed" in turns[0].observation and "5\n-3" in turns[1].observation
    assert "calc/core.py:4:def clamp" in turns[2].observation
    assert "    10\t    return x" in turns[3].observation
    assert "Line 8 has `<` where it needs `>`" in tok.decode(turns[4].completion_ids)
    assert "3\n3" in turns[6].observation and "1 passed" in turns[7].observation
    changed = [line for line in kept.trajectory.model_patch.splitlines()
               if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert changed == ["-    if x < hi:", "+    if x > hi:", "-        result -= x",
                       "+        result += x"]  # the gold patch, nothing else


def test_sft_refuses_expert_demonstrations_of_heldout_tasks(tmp_path, capsys):
    from swefleet.app.cli import main

    out = tmp_path / "sft"
    code = main(["sft", "--config", str(REPO / "configs" / "quickstart.toml"), "--set",
                 'sft.demonstrations="expert"', "--set", 'tasks.split="heldout"',
                 "--output-dir", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "3 of the 3 tasks to train on are of split 'heldout'" in err
    assert not out.exists()


@pytest.mark.parametrize(("old_str", "hint"), [
    ("     9\t    if x < hi:", "It starts with line numbers as `view` shows them"),
    ("if x < hi:\n    return hi", "It matches line 8 if indentation is ignored"),
    ("    if x <= hi:", "The closest line is 8: `if x < hi:`"),
    ("nothing like it", "View the lines you want to change and copy them exactly"),
])
def test_str_replace_that_finds_nothing_says_why(old_str, hint):
    from swefleet.agents.scaffolds.files import not_found_hint

    assert not_found_hint(CALC.encode(), old_str).startswith(hint)


# ---------------------------------------------------------------- the trace tool


def _plan_with_reproduction():
    task = _task()
    script = "from calc.core import clamp\nassert clamp(5, 0, 3) == 3\n"
    task = task.model_copy(update={"problem_statement":
                                   with_reproduction(task.problem_statement, script)})
    plan = plan_demonstration(task, _files(), REPO_FILES)
    assert plan.reproduction_rerun == reproduction_commands(task.problem_statement)[
        "reproduction_rerun"] == "python3 /tmp/repro.py"
    return plan, task


LISTING = "<returncode>0</returncode>\n<output>\ntest_core.py\ntest_other.py\n</output>"


def _traced_dialogue():
    plan, task = _plan_with_reproduction()
    dialogue = expert_steps(plan, task, trace=True)
    assert next(dialogue).arguments == {"command": "ls tests"}
    tests = dialogue.send(LISTING)
    assert tests.tool == "bash"
    repro = dialogue.send("<returncode>0</returncode>\n<output>\n3 passed\n</output>")
    assert repro.tool == "bash" and repro.arguments["command"].startswith("cat > /tmp/repro.py")
    step = dialogue.send("<returncode>1</returncode>\n<output>\nAssertionError\n</output>")
    assert step.tool == "trace"
    assert step.arguments == {"script": "/tmp/repro.py", "tests": "tests/test_core.py"}
    assert "--tests tests/test_core.py /tmp/repro.py" in render_step(step, "bash")
    return plan, dialogue


@pytest.mark.parametrize("shown", [True, False])
def test_the_expert_finds_the_function_in_the_trace_else_greps(shown):
    plan, dialogue = _traced_dialogue()
    line = f"clamp  ({plan.file}:{plan.def_line})" if shown else "other  (calc/x.py:1)"
    step = dialogue.send(f"<returncode>1</returncode>\n<output>\n--- calls\n{line}\n</output>")
    if shown:
        assert step.tool == "view" and step.thought.startswith("Of the calls, `clamp` computes")
    else:
        assert step.tool == "bash" and step.arguments["command"] == plan.grep


@pytest.mark.parametrize("rank", [1, 2, 3, 4])
def test_the_expert_reads_the_suspects_in_order_down_to_the_buggy_one(rank):
    plan, dialogue = _traced_dialogue()
    others = [("other", "calc/x.py", 10), ("third", "calc/y.py", 3), ("fourth", "calc/y.py", 9)]
    suspects = others[:rank - 1] + [("clamp", plan.file, plan.def_line)] + others[rank - 1:]
    listed = "\n".join(f"{n}. {name}  ({path}:{line}): line {line + 1} ran in 0 of 3 passing tests"
                       for n, (name, path, line) in enumerate(suspects, 1))
    step = dialogue.send("<returncode>1</returncode>\n<output>\n--- calls\n(none)\n--- suspects: "
                         f"the functions it ran (3 passed, 0 failed) ---\n{listed}\n</output>")
    if rank == 4:  # beyond the suspects the expert reads: found another way
        assert step.tool == "bash" and step.arguments["command"] == plan.grep
        return
    for name, path, line in others[:rank - 1]:
        assert step.tool == "view" and step.arguments == {"path": path, "view_range": [line, line + 24]}
        assert f"suspect is `{name}`, in {path} at line {line}" in step.thought
        step = dialogue.send("<tool_response>\ncalc/x.py, lines 10-34 of 90:\n</tool_response>")
    assert step.tool == "view" and step.arguments["path"] == plan.file
    lead = "The first suspect is" if rank == 1 else f"`{others[rank - 2][0]}` is right for this"
    assert step.thought.startswith(lead) and "`clamp`; it is in" in step.thought


def test_without_the_tool_the_expert_greps():
    plan, task = _plan_with_reproduction()
    dialogue = expert_steps(plan, task)
    next(dialogue)
    dialogue.send(LISTING)
    dialogue.send("<returncode>0</returncode>\n<output>\n3 passed\n</output>")
    step = dialogue.send("<returncode>1</returncode>\n<output>\nAssertionError\n</output>")
    assert step.tool == "bash" and step.arguments["command"] == plan.grep


def test_a_missing_statement_and_two_exchanged_lines_are_explained():
    bug = "def f(xs):\n    h = n // 2\n    n = len(xs)\n    return h\n"
    patch = ("--- a/m.py\n+++ b/m.py\n@@ -1,4 +1,4 @@\n def f(xs):\n-    h = n // 2\n"
             "-    n = len(xs)\n+    n = len(xs)\n+    h = n // 2\n     return h\n")
    task = Task(instance_id="m-1", repo="m/m", problem_statement="f", patch=patch,
                bug_kind="swapped_statements")
    (edit,) = plan_demonstration(task, {"m.py": bug.encode()}, []).edits
    assert edit.why == "Lines 2 and 3 are in the wrong order: `n = len(xs)` has to come first."
    patch = "--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,3 @@\n def f(xs):\n+    xs.sort()\n     return xs\n"
    task = Task(instance_id="m-2", repo="m/m", problem_statement="f", patch=patch,
                bug_kind="removed_statement")
    (edit,) = plan_demonstration(task, {"m.py": b"def f(xs):\n    return xs\n"}, []).edits
    assert edit.why == "A statement is missing after line 1: it needs `xs.sort()`."


def test_a_listing_without_the_test_files_aborts_the_demonstration():
    plan, task = _plan_with_reproduction()
    dialogue = expert_steps(plan, task)
    next(dialogue)
    with pytest.raises(ExpertAbort) as err:
        dialogue.send("<returncode>0</returncode>\n<output>\ntest_other.py\n</output>")
    assert err.value.reason == "tests_not_listed"


def test_an_attached_reproduction_is_run_as_it_is():
    from swefleet.envs.synth.repro import ATTACHED, SECTION, attached

    _, task = _plan_with_reproduction()
    statement, script = attached(task.problem_statement)
    assert ATTACHED in statement and SECTION not in statement and script
    assert reproduction_in(statement) == script == reproduction_in(task.problem_statement)
    commands = reproduction_commands(statement)
    assert commands["reproduction_run"] == commands["reproduction_rerun"] == "python3 /tmp/repro.py"
    assert reproduction_commands(task.problem_statement)["reproduction_run"].startswith("cat > ")
    assert without_reproduction(statement) == without_reproduction(task.problem_statement)
