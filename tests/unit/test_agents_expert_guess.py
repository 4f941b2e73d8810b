"""The expert's first guess: another edit of the buggy line that the bug generator could make
(never the buggy line, never the fix), tried, checked with the issue's example and corrected;
a guess that passes ends the demonstration; a whole episode through the real loop on a local
repository ends with the gold fix."""

from __future__ import annotations

import os
import sys
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from swefleet.agents.config import AgentConfig
from swefleet.agents.expert import plan_demonstration
from swefleet.agents.expert_dialogue import ExpertAbort, expert_steps
from swefleet.agents.expert_guess import first_guess, takes_first_guess, with_first_guess
from swefleet.agents.expert_run import expert_demonstrations
from swefleet.envs.synth.repro import with_reproduction

from swefleet.types import EpisodeStatus, GradeCause, GradeResult, GradeStatus, Task

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ holds shared helpers
from local_sandbox import LocalShellSandbox

pytestmark = pytest.mark.unit

CALC = '''def clamp(x, lo, hi):
    if x < lo:
        return lo
    if x < hi:
        return hi
    return x


def pad(s):
    return s.rjust(7)
'''
CLAMP_FIX = """--- a/calc/core.py
+++ b/calc/core.py
@@ -3,3 +3,3 @@ def clamp(x, lo, hi):
         return lo
-    if x < hi:
+    if x > hi:
         return hi
"""
PAD_FIX = """--- a/calc/core.py
+++ b/calc/core.py
@@ -9,2 +9,2 @@ def pad(s):
 def pad(s):
-    return s.rjust(7)
+    return s.rjust(8)
"""
SCRIPT = "from calc.core import clamp\nassert clamp(5, 0, 3) == 3\n"


def _task(patch: str, kind: str, script: str = SCRIPT) -> Task:
    return Task.model_validate({
        "instance_id": f"calc__calc-{kind}", "repo": "calc/calc", "patch": patch,
        "problem_statement": with_reproduction("`clamp` returns the wrong value", script),
        "bug_kind": kind, "test_files": ["tests/test_core.py"]})


def _plan(task: Task):
    return plan_demonstration(task, {"calc/core.py": CALC.encode()}, [])


def test_the_guess_is_another_edit_of_the_line_and_the_correction_leads_to_the_fix():
    (edit,) = _plan(_task(CLAMP_FIX, "flipped_comparison")).edits
    found = first_guess(edit, CALC, "flipped_comparison", "seed")
    assert found is not None
    guess, correction = found.guess, found.correction
    assert guess.old == edit.old and correction.new == edit.new and correction.old == guess.new
    guessed = [line for line in guess.new.split("\n") if line not in edit.old.split("\n")]
    assert guessed == ["    if x <= hi:"]  # the only one-line mutation that is not the fix
    assert guess.why.startswith("Line 4 looks wrong: `<` there may need to be `<=`.")
    assert correction.why == ("So `<=` is not the fix; I undo it. Looking at line 4 again: the "
                              "comparison is the wrong way round: `<` needs to be `>`.")


def test_an_integer_guess_goes_the_other_way_and_multi_line_fixes_take_none():
    (edit,) = _plan(_task(PAD_FIX, "off_by_one")).edits
    found = first_guess(edit, CALC, "off_by_one", "seed")
    assert found is not None and "s.rjust(6)" in found.guess.new
    removed = ("--- a/calc/core.py\n+++ b/calc/core.py\n@@ -4,3 +4,2 @@ def clamp(x, lo, hi):\n"
               "     if x < hi:\n-        return hi\n-    return x\n+        return x\n")
    (edit,) = _plan(_task(removed, "removed_statement")).edits
    assert first_guess(edit, CALC, "removed_statement", "seed") is None


def test_the_draw_is_stable_and_follows_the_fraction():
    ids = [f"pkg__pkg-{i}" for i in range(400)]
    assert not any(takes_first_guess(i, 0.0) for i in ids)
    assert all(takes_first_guess(i, 1.0) for i in ids)
    half = [i for i in ids if takes_first_guess(i, 0.5)]
    assert 160 < len(half) < 240 and half == [i for i in ids if takes_first_guess(i, 0.5)]


def _until_guess(task: Task):
    plan = with_first_guess(_plan(task), {"calc/core.py": CALC.encode()}, "flipped_comparison",
                            task.instance_id)
    assert plan.first_guess is not None
    dialogue = expert_steps(plan, task)
    step = next(dialogue)
    while step.tool != "str_replace":  # listing, tests, example, grep, view
        code = 0 if step.tool == "view" or step.arguments["command"].startswith(("ls", "grep")) else 1
        step = dialogue.send(f"<returncode>{code}</returncode>\n<output>\ntest_core.py\n"
                             "calc/core.py:1:def clamp(x, lo, hi):\n</output>")
    assert step.arguments["new_str"] == plan.first_guess.guess.new
    rerun = dialogue.send("<tool_response>\nEdited calc/core.py. Lines 1-6 of 10 now read:\n")
    assert rerun.tool == "bash" and rerun.arguments["command"] == plan.reproduction_rerun
    return plan, dialogue


def test_a_guess_that_still_fails_is_corrected_and_one_that_passes_aborts():
    task = _task(CLAMP_FIX, "flipped_comparison")
    plan, dialogue = _until_guess(task)
    fix = dialogue.send("<returncode>1</returncode>\n<output>\nTraceback (most recent call "
                        "last):\n  File \"/tmp/repro.py\", line 2\nAssertionError\n</output>")
    assert fix.tool == "str_replace" and fix.arguments["new_str"] == plan.edits[0].new
    assert fix.arguments["old_str"] == plan.first_guess.guess.new
    assert fix.thought.startswith("The example still fails: `AssertionError`. So `<=` is not")
    _, dialogue = _until_guess(task)
    with pytest.raises(ExpertAbort) as err:
        dialogue.send("<returncode>0</returncode>\n<output>\n</output>")
    assert err.value.reason == "first_guess_passed"


class _LocalFarm:
    def __init__(self, root: Path, files: dict[str, str]) -> None:
        self.root, self.files = root, files

    @asynccontextmanager
    async def acquire(self, task):
        yield LocalShellSandbox.create(self.root / "repo", self.files)


class _FixGrader:
    """Resolved when the patch holds the fixed line (a deterministic fake of the grader)."""

    async def grade(self, task, patch):
        ok = "+    if x > hi:" in patch
        return GradeResult(instance_id=task.instance_id, cause=GradeCause.tests,
                           status=GradeStatus.resolved if ok else GradeStatus.unresolved)


async def test_a_whole_episode_tries_the_guess_sees_it_fail_and_fixes(tok, tmp_path,
                                                                      monkeypatch):
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "repo"))  # the script runs from /tmp
    task = _task(CLAMP_FIX, "flipped_comparison")
    files = {"calc/__init__.py": "", "calc/core.py": CALC,
             "tests/test_core.py": "from calc.core import clamp\n\n\ndef test_low():\n"
                                   "    assert clamp(-1, 0, 5) == 0\n"}
    agent = AgentConfig(scaffold="tools", max_steps=3, max_tokens_per_turn=200,
                        context_budget_tokens=16384, command_timeout_s=30)
    [demo] = await expert_demonstrations([task], _LocalFarm(tmp_path, files), _FixGrader(), tok,
                                         agent, first_guess_fraction=1.0)
    assert demo.kept and demo.trajectory.status == EpisodeStatus.resolved, demo.detail
    replies = [tok.decode(t.completion_ids) for t in demo.trajectory.turns]
    tried = next(i for i, r in enumerate(replies) if "may need to be `<=`" in r)
    assert "AssertionError" in demo.trajectory.turns[tried + 1].observation  # the rerun failed
    assert replies[tried + 2].startswith("The example still fails: `AssertionError`.")
    changed = [line for line in demo.trajectory.model_patch.splitlines()
               if line[:1] in "+-" and line[:3] not in ("+++", "---")]
    assert changed == ["-    if x < hi:", "+    if x > hi:"]  # the gold patch, nothing else
