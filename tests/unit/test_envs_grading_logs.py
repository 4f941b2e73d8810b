"""Grading decisions from logs, SWE-bench formats and grade_many, without Docker."""

from __future__ import annotations

import asyncio
import json

import pytest
from swefleet.envs import gradelog as g
from swefleet.envs import grading
from swefleet.envs import swebench_io as sio

from swefleet.types import GradeCause, GradeResult, GradeStatus, Task

pytestmark = pytest.mark.unit

F2P = ["tests/test_a.py::test_fixed", "tests/test_a.py::test_param[1-2]"]
P2P = ["tests/test_a.py::test_old", "tests/test_a.py::test_skippy"]


def task(**kw) -> Task:
    base = {
        "instance_id": "demo__demo-1",
        "repo": "demo/demo",
        "problem_statement": "x",
        "image": "img",
        "FAIL_TO_PASS": F2P,
        "PASS_TO_PASS": P2P,
    }
    return Task(**{**base, **kw})


def summary(**statuses: str) -> str:
    names = {"fixed": F2P[0], "param": F2P[1], "old": P2P[0], "skippy": P2P[1]}
    lines = ["============ short test summary info ============"]
    lines += [f"{status} {names[k]}" for k, status in statuses.items()]
    return "\n".join(lines) + "\n"


def make_log(output: str, exit_code: int | None = 1, timed_out: bool = False) -> str:
    verdict = {"phase": "tests", "exit_code": exit_code, "timed_out": timed_out}
    return "\n".join(
        [
            ">>>>> swefleet grade demo__demo-1 image=img",
            f"{g.APPLY_PATCH_PASS} (git apply)",
            g.START_TEST_OUTPUT,
            output,
            g.END_TEST_OUTPUT,
            f"{g.TEST_EXIT_CODE}: {exit_code}",
            g.VERDICT + json.dumps(verdict),
            "",
        ]
    )


def test_all_pass_is_resolved():
    log = make_log(summary(fixed="PASSED", param="PASSED", old="PASSED", skippy="PASSED"), 0)
    r = g.regrade_from_log(task(), log)
    assert (r.status, r.cause, r.reason) == (GradeStatus.resolved, GradeCause.tests, "")
    assert r.fail_to_pass == {"success": F2P, "failure": []}
    assert r.pass_to_pass == {"success": P2P, "failure": []}
    assert r.tests[F2P[0]] == "PASSED" and r.log == log


def test_failing_f2p_is_unresolved_with_counts():
    log = make_log(summary(fixed="FAILED", param="PASSED", old="PASSED", skippy="PASSED"))
    r = g.regrade_from_log(task(), log)
    assert r.status == GradeStatus.unresolved and r.cause == GradeCause.tests
    assert r.reason == "1/2 FAIL_TO_PASS failed, 0/2 PASS_TO_PASS failed"
    assert r.fail_to_pass["failure"] == [F2P[0]]


def test_swebench_semantics_skipped_p2p_ok_skipped_or_missing_f2p_not():
    ok = make_log(summary(fixed="PASSED", param="PASSED", old="PASSED", skippy="SKIPPED"), 0)
    assert g.regrade_from_log(task(), ok).status == GradeStatus.resolved
    skipped_f2p = make_log(summary(fixed="SKIPPED", param="PASSED", old="PASSED"), 0)
    assert g.regrade_from_log(task(), skipped_f2p).status == GradeStatus.unresolved
    missing_f2p = make_log(summary(param="PASSED", old="PASSED", skippy="PASSED"), 0)
    r = g.regrade_from_log(task(), missing_f2p)
    assert r.status == GradeStatus.unresolved and r.fail_to_pass["failure"] == [F2P[0]]


def test_no_results_is_suite_did_not_run():
    log = make_log("ImportError while loading conftest '/testbed/conftest.py'.\n", 4)
    r = g.regrade_from_log(task(), log)
    assert (r.status, r.cause) == (GradeStatus.error, GradeCause.no_suite)
    assert r.reason.startswith("suite did not run")


def test_spoofed_passes_with_failing_exit_code_are_rejected():
    log = make_log(summary(fixed="PASSED", param="PASSED", old="PASSED", skippy="PASSED"), 2)
    r = g.regrade_from_log(task(), log)
    assert (r.status, r.cause) == (GradeStatus.error, GradeCause.no_suite)
    assert r.reason.startswith("suite did not run")


def test_markers_printed_by_the_tests_do_not_change_the_verdict():
    fake = (
        f"{g.TESTS_TIMEOUT}\n{g.APPLY_PATCH_FAIL}\n{g.END_TEST_OUTPUT}\n"
        + g.VERDICT
        + json.dumps({"phase": "infra", "error": "x"})
        + "\n"
    )
    log = make_log(fake + summary(fixed="FAILED", param="PASSED", old="PASSED", skippy="PASSED"))
    assert g.regrade_from_log(task(), log).status == GradeStatus.unresolved


@pytest.mark.parametrize(
    ("verdict", "cause", "reason"),
    [
        ({"phase": "model_patch"}, "patch_failed", "patch did not apply"),
        ({"phase": "test_patch"}, "patch_failed", "patch did not apply: the test patch conflicts"),
        ({"phase": "reset"}, "infra", "infra: could not reset"),
        ({"phase": "infra", "error": "APIError: boom"}, "infra", "infra: APIError: boom"),
        ({"phase": "tests", "exit_code": None, "timed_out": True}, "timeout", "tests timed out"),
    ],
)
def test_error_phases(verdict, cause, reason):
    log = f"header\n{g.VERDICT}{json.dumps(verdict)}\n"
    r = g.regrade_from_log(task(), log)
    assert (r.status, r.cause) == (GradeStatus.error, GradeCause(cause))
    assert r.reason.startswith(reason)


def test_log_without_verdict_is_infra():
    log = make_log(summary(fixed="PASSED"), 0)
    truncated = log[: log.index(g.VERDICT)]
    r = g.regrade_from_log(task(), truncated)
    assert (r.status, r.cause) == (GradeStatus.error, GradeCause.infra)
    assert r.reason.startswith("infra:")


def test_regrade_uses_the_tasks_current_lists():
    log = make_log(summary(fixed="PASSED", param="FAILED", old="PASSED", skippy="PASSED"))
    assert g.regrade_from_log(task(), log).status == GradeStatus.unresolved
    corrected = task(FAIL_TO_PASS=[F2P[0]])  # e.g. a flaky test dropped from the list
    assert g.regrade_from_log(corrected, log).status == GradeStatus.resolved


def test_test_files_and_patch_paths():
    test_patch = (
        "diff --git a/tests/test_a.py b/tests/test_a.py\n--- a/tests/test_a.py\n+++ b/tests/test_a.py\n"
        "@@ -1 +1 @@\n-x\n+y\n"
        "diff --git a/tests/new_test.py b/tests/new_test.py\nnew file mode 100644\n"
        "--- /dev/null\n+++ b/tests/new_test.py\n@@ -0,0 +1 @@\n+z\n"
        "diff --git a/tests/data.json b/tests/data.json\n--- a/tests/data.json\n"
        "+++ b/tests/data.json\n@@ -1 +1 @@\n-1\n+2\n"
        "diff --git a/tests/old_test.py b/tests/old_test.py\ndeleted file mode 100644\n"
        "--- a/tests/old_test.py\n+++ /dev/null\n@@ -1 +0,0 @@\n-q\n"
    )
    t = task(test_patch=test_patch)
    assert g.test_files_of(t) == ["tests/test_a.py", "tests/new_test.py"]
    assert g.patch_paths(test_patch) == [
        "tests/test_a.py",
        "tests/new_test.py",
        "tests/data.json",
        "tests/old_test.py",
    ]
    assert g.test_files_of(task(test_patch=test_patch, test_files=["x.py"])) == ["x.py"]


def test_log_parsers_come_from_swebench():
    from swebench.harness.log_parsers import PARSER_REGISTRY

    assert g.get_log_parser("pytest") is PARSER_REGISTRY["parse_log_pytest"]
    assert g.get_log_parser("parse_log_django") is PARSER_REGISTRY["parse_log_django"]
    with pytest.raises(ValueError, match="unknown log parser 'nope'"):
        g.get_log_parser("nope")


def test_cap_text_keeps_head_and_more_tail():
    text = "H" * 1000 + "T" * 1000
    capped = g.cap_text(text, 400)
    assert capped.startswith("H" * 100) and capped.endswith("T" * 300)
    assert "1600 characters cut" in capped
    assert g.cap_text("short", 400) == "short"


# ---------------------------------------------------------------------------------------------
# SWE-bench predictions and reports


def test_read_predictions_all_formats(tmp_path):
    preds = [
        {"instance_id": "a", "model_patch": "p", "model_name_or_path": "m"},
        {"instance_id": "b", "model_patch": None, "model_name_or_path": "m"},
    ]
    jl = tmp_path / "p.jsonl"
    sio.write_predictions(jl, {"a": "p", "b": ""}, "m")
    as_list = tmp_path / "l.json"
    as_list.write_text(json.dumps(preds))
    as_dict = tmp_path / "d.json"
    as_dict.write_text(json.dumps({p["instance_id"]: p for p in preds}))
    assert sio.read_predictions(jl)["a"].model_patch == "p"
    assert sio.read_predictions(jl)["b"].model_name_or_path == "m"
    for path in (as_list, as_dict):
        got = sio.read_predictions(path)
        assert set(got) == {"a", "b"} and got["b"].model_patch is None


def test_read_predictions_errors_say_where(tmp_path):
    bad = tmp_path / "p.jsonl"
    bad.write_text('{"instance_id": "a", "model_patch": ""}\n{"model_patch": "x"}\n')
    with pytest.raises(ValueError, match=r"p\.jsonl: line 2: \('instance_id',\)"):
        sio.read_predictions(bad)
    bad.write_text('{"instance_id": "a"}\n{"instance_id": "a"}\n')
    with pytest.raises(ValueError, match="line 2: duplicate instance_id 'a'"):
        sio.read_predictions(bad)
    bad.write_text("{oops\n")
    with pytest.raises(ValueError, match="line 1: invalid JSON"):
        sio.read_predictions(bad)


def test_reports_decide_on_the_cause_not_the_reason_text():
    """A reason that reads like another cause changes no report field: only `cause` decides."""
    lying = [
        GradeResult(instance_id="a", status="error", cause="no_suite", reason="infra: not really"),
        GradeResult(instance_id="b", status="error", cause="infra", reason="tests timed out"),
        GradeResult(instance_id="c", status="error", cause="patch_failed", reason="odd"),
    ]
    bodies = {r.instance_id: sio.swebench_instance_report(r)[r.instance_id] for r in lying}
    assert [bodies[i]["infra_failure"] for i in "abc"] == [False, True, False]
    assert [bodies[i]["patch_successfully_applied"] for i in "abc"] == [True, False, False]
    assert "infra_failure_reason" not in bodies["a"]
    assert [g.reward_of(r) for r in lying] == [0.0, None, 0.0]


# ---------------------------------------------------------------------------------------------
# grade_many


class ScriptedGrader:
    """Returns scripted results; records the peak number of concurrent calls."""

    def __init__(self, script: dict[str, list]):
        self.script, self.active, self.peak, self.calls = script, 0, 0, []

    async def grade(self, task: Task, model_patch: str) -> GradeResult:
        self.calls.append((task.instance_id, model_patch))
        self.active += 1
        self.peak = max(self.peak, self.active)
        await asyncio.sleep(0.01)
        self.active -= 1
        outcome = self.script[task.instance_id].pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        status, cause, reason = outcome
        return GradeResult(instance_id=task.instance_id, status=status, cause=cause, reason=reason)


async def test_grade_many_order_concurrency_retry_and_fault_boundary():
    tasks = [task(instance_id=f"t{i}") for i in range(6)]
    script = {f"t{i}": [("resolved", "tests", "")] for i in range(6)}
    script["t1"] = [("error", "infra", "infra: APIError: flake"), ("unresolved", "tests", "1/1")]
    script["t2"] = [RuntimeError("grader bug"), RuntimeError("again")]
    grader = ScriptedGrader(script)
    out = await grading.grade_many(tasks, {t.instance_id: "p" for t in tasks}, grader, concurrency=2)
    assert [r.instance_id for r in out] == [t.instance_id for t in tasks]
    assert out[1].status == GradeStatus.unresolved  # retried after an infra error
    assert (out[2].status, out[2].cause) == (GradeStatus.error, GradeCause.infra)
    assert out[2].reason == "infra: RuntimeError: again"
    assert all(r.status == GradeStatus.resolved for r in out[3:])
    assert grader.peak == 2


async def test_grade_many_rejects_missing_patches():
    with pytest.raises(ValueError, match="no patch for 1 task"):
        await grading.grade_many([task()], {}, ScriptedGrader({}))


@pytest.mark.parametrize(
    ("status", "cause", "reward"),
    [
        ("resolved", "tests", 1.0),
        ("unresolved", "tests", 0.0),
        ("error", "patch_failed", 0.0),
        ("error", "timeout", 0.0),
        ("error", "no_suite", 0.0),
        ("tampered", "tampered", 0.0),
        ("error", "unknown", 0.0),
        ("error", "infra", None),
    ],
)
def test_reward_of_never_scores_infra(status, cause, reward):
    result = GradeResult(instance_id="x", status=status, cause=cause, reason="whatever")
    assert g.reward_of(result) == reward
    assert g.is_infra(result) == (reward is None)


def test_a_patch_that_is_not_text_is_refused_without_docker():
    """A lone surrogate (a `\\ud800` escape in a predictions file) is the patch's failure,
    scored 0, never an infra error (before: UnicodeEncodeError out of `grade`)."""
    grader = grading.DockerGrader("unit-no-docker")
    try:
        r = grader.grade_sync(task(), "diff --git a/x b/x\n+\ud800\n")
    finally:
        grader.close()
    assert (r.status, r.cause, r.reason) == (GradeStatus.error, GradeCause.patch_failed,
                                             g.REASON_PATCH)
    assert "not valid text" in r.log and g.reward_of(r) == 0.0
    assert g.regrade_from_log(task(), r.log).cause == GradeCause.patch_failed


@pytest.mark.parametrize(
    ("patch", "writes"),
    [
        ("diff --git a/.git/hooks/x b/.git/hooks/x\nnew file mode 100755\n", True),
        ("--- a/sub/.git/config\n+++ b/sub/.git/config\n", True),
        ('--- /dev/null\n+++ "b/\\056git/hooks/post-checkout"\n', True),
        ("*** a/.git/HEAD\n--- b/.git/HEAD\n", True),
        ("diff --git a/.gitignore b/.gitignore\n--- a/.gitignore\n+++ b/.gitignore\n", False),
        ("diff --git a/.github/ci.yml b/.github/ci.yml\n", False),
        ("--- a/x.py\n+++ b/x.py\n@@ -1 +1 @@\n-see .git/config\n+x\n", False),
    ],
)
def test_patches_that_write_into_git_dir_are_recognised(patch, writes):
    assert grading.writes_git_dir(patch) is writes


def test_read_predictions_invalid_utf8_names_the_file_and_line(tmp_path):
    bad = tmp_path / "p.jsonl"
    bad.write_bytes(b'{"instance_id": "a", "model_patch": ""}\n{"instance_id": "b", '
                    b'"model_patch": "caf\xe9"}\n')
    with pytest.raises(ValueError, match=r"p\.jsonl: line 2: invalid UTF-8 \(byte 0xe9\)"):
        sio.read_predictions(bad)


def test_parametrized_ids_with_spaces_are_read_whole():
    """pytest ids like `test_x[a b]`: swebench's parser keeps `test_x[a` (SWE-bench's own lists
    hold that key, so it stays); a task whose lists hold the whole id is graded too."""
    whole = ["tests/test_a.py::test_x[a b]", "tests/test_a.py::test_y[c - d]"]
    out = (
        "============ short test summary info ============\n"
        f"PASSED {whole[0]}\nFAILED {whole[1]} - AssertionError: assert [1] == [2]\n"
    )
    t = task(FAIL_TO_PASS=whole, PASS_TO_PASS=[])
    r = g.regrade_from_log(t, make_log(out, 1))
    assert r.tests[whole[0]] == "PASSED" and r.tests[whole[1]] == "FAILED"
    assert r.tests["tests/test_a.py::test_x[a"] == "PASSED"  # swebench's key stays
    assert r.fail_to_pass == {"success": [whole[0]], "failure": [whole[1]]}
    fixed = out.replace(f"FAILED {whole[1]} - AssertionError: assert [1] == [2]", f"PASSED {whole[1]}")
    assert g.regrade_from_log(t, make_log(fixed, 0)).status == GradeStatus.resolved


def test_test_paths_with_spaces_and_quotes_are_read_whole():
    """`git diff` ends a name with a space by a tab and C-quotes a non-ASCII one."""
    test_patch = (
        "diff --git a/tests/test a.py b/tests/test a.py\n--- a/tests/test a.py\t\n"
        "+++ b/tests/test a.py\t\n@@ -1 +1 @@\n-x\n+y\n"
        'diff --git "a/tests/test_\\303\\251.py" "b/tests/test_\\303\\251.py"\n'
        'new file mode 100644\n--- /dev/null\n+++ "b/tests/test_\\303\\251.py"\n@@ -0,0 +1 @@\n+z\n'
    )
    assert g.test_files_of(task(test_patch=test_patch)) == ["tests/test a.py", "tests/test_é.py"]
    assert g.patch_paths(test_patch) == ["tests/test a.py", "tests/test_é.py"]


def test_dropped_protected_paths_are_read_back_from_the_log():
    ok = summary(fixed="PASSED", param="PASSED", old="PASSED", skippy="PASSED")
    log = make_log(ok, 0).replace('"timed_out": false}', '"timed_out": false, "dropped": ["conftest.py"]}')
    r = g.regrade_from_log(task(), log)
    assert r.status == GradeStatus.resolved and r.dropped_paths == ["conftest.py"]
    assert g.regrade_from_log(task(), make_log(ok, 0)).dropped_paths == []
    hidden = log.rpartition(g.VERDICT)[0] + g.VERDICT + '{"phase": "protected", "paths": ["a.pth"]}\n'
    r = g.regrade_from_log(task(), hidden)
    assert (r.status, r.cause) == (GradeStatus.error, GradeCause.patch_failed)
    assert r.reason.startswith("patch did not apply")
    assert "a.pth" in r.reason and g.reward_of(r) == 0.0


def test_old_grade_records_still_load():
    old = {"instance_id": "x", "status": "resolved", "log": "", "duration_s": 1.0}
    assert GradeResult.model_validate(old).dropped_paths == []


@pytest.mark.parametrize(
    ("status", "reason", "cause"),
    [
        ("resolved", "", "tests"),
        ("unresolved", "1/2 FAIL_TO_PASS failed, 0/2 PASS_TO_PASS failed", "tests"),
        ("tampered", "tampered: canary t.py::test_x PASSED, want FAILED", "tampered"),
        ("error", "patch did not apply", "patch_failed"),
        ("error", "patch did not apply: the test patch conflicts with the model patch",
         "patch_failed"),
        ("error", "tests timed out", "timeout"),
        ("error", "suite did not run (exit code 4, no test results in the log)", "no_suite"),
        ("error", "infra: APIError: boom", "infra"),
        ("error", "something else", "unknown"),
    ],
)
def test_records_without_a_cause_get_it_from_their_reason(status, reason, cause):
    """A grade written before `cause` existed (a JSON line of an old episodes.jsonl) loads with
    the cause its reason text names; a record that has one keeps it."""
    line = json.dumps({"instance_id": "x", "status": status, "reason": reason, "log": "L",
                       "duration_s": 1.0, "tests": {}})
    r = GradeResult.model_validate_json(line)
    assert (r.status, r.cause, r.reason) == (status, GradeCause(cause), reason)
    assert GradeResult.model_validate_json(r.model_dump_json()) == r
    assert g.is_infra(r) == (cause == "infra")


def test_reading_logs_needs_neither_docker_nor_datasets():
    """A grading-only machine (bwrap on a GPU node) has swebench and unidiff, not the packages
    swebench's harness package imports up front."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "for m in ('datasets', 'docker', 'modal'): sys.modules[m] = None\n"
        "from swefleet.envs.gradelog import get_log_parser\n"
        "assert get_log_parser('pytest') is not None\n"
        "from swebench.harness.grading import get_eval_tests_report\n"
        "print('ok')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, timeout=60)
    assert proc.stdout.strip() == "ok", proc.stderr
