"""Canary planting, tamper evidence and runner flags, without Docker (real pytest runs them)."""

from __future__ import annotations

import ast
import json
import random
import subprocess
import sys

import pytest
from swefleet.envs import canary
from swefleet.envs import gradelog as g
from swefleet.envs.tamper import junit_outcomes, runner_flags, tamper_evidence

from swefleet.types import GradeStatus, Task

pytestmark = pytest.mark.unit

SOURCE = '''import pytest
from mypkg.core import add, sub


@pytest.mark.parametrize("x", [1, 2])
def test_add_small(x):
    assert add(x, 1) == x + 1


class TestSub:
    def test_sub_basic(self):
        assert sub(3, 1) == 2


def test_sub_negative():
    assert sub(1, 3) == -2
'''
F2P = ["tests/test_core.py::test_sub_negative"]
P2P = ["tests/test_core.py::TestSub::test_sub_basic"]


def test_canaries_one_pass_one_fail_run_for_real(tmp_path):
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg/__init__.py").write_text("")
    (tmp_path / "mypkg/core.py").write_text("def add(a, b):\n    return a + b\n\n\n"
                                           "def sub(a, b):\n    return a - b\n")
    (tmp_path / "tests").mkdir()
    seen = set()
    for seed in range(3):
        text, must_pass, must_fail = canary.plant(SOURCE, "tests/test_core.py", random.Random(seed))
        ast.parse(text)
        assert "add(x, 1)" in text and text.count("def test_") == 5
        assert any(n in text.split(must_pass[0].split("::")[1])[1][:200] for n in ("add", "sub"))
        seen.add(must_pass[0])
        (tmp_path / "tests/test_core.py").write_text(text)
        out = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider",
                              "tests/test_core.py"], cwd=tmp_path, capture_output=True, check=False,
                             text=True).stdout
        assert f"PASSED {must_pass[0]}\n" in out and f"FAILED {must_fail[0]} - " in out, out
        assert "1 failed, 5 passed" in out, out
    assert len(seen) == 3  # a fresh name per run


def test_canaries_skip_files_that_do_not_parse():
    assert canary.plant("def (:\n", "t.py", random.Random(0)) is None
    marked = "import pytest\n\npytestmark = pytest.mark.parametrize('x', [1])\n"
    assert canary.plant(marked, "t.py", random.Random(0)) is None
    assert canary.applies_to("pytest", "tests/t.py") and canary.applies_to("parse_log_pytest", "t.py")
    assert not canary.applies_to("django", "tests/t.py") and not canary.applies_to("pytest", "t.txt")


def statuses(**kw) -> dict[str, str]:
    return {"tests/test_core.py::" + k.replace("__", "::"): v for k, v in kw.items()}


CAN = {"canaries": {"pass": ["tests/test_core.py::test_keep"],
                    "fail": ["tests/test_core.py::test_drop"]}}


def genuine() -> dict[str, str]:
    return statuses(test_keep="PASSED", test_drop="FAILED", test_sub_negative="PASSED",
                    TestSub__test_sub_basic="PASSED")


def test_tamper_evidence_rules():
    deciding = F2P + P2P
    assert tamper_evidence(genuine(), 1, deciding, CAN) == []
    assert tamper_evidence(genuine(), 0, deciding, {}) == []  # no canaries: nothing to judge
    assert tamper_evidence({}, 2, deciding, CAN) == []  # collection broke: not tampering
    assert "exited 0" in tamper_evidence(genuine(), 0, deciding, CAN)[0]
    forced = {**genuine(), "tests/test_core.py::test_drop": "PASSED"}
    assert "must fail, reported PASSED" in tamper_evidence(forced, 1, deciding, CAN)[0]
    xfailed = {**genuine(), "tests/test_core.py::test_keep": "XFAIL"}
    assert "must pass" in tamper_evidence(xfailed, 1, deciding, CAN)[0]
    hidden = {k: v for k, v in genuine().items() if "drop" not in k}
    assert "canaries or twins missing" in tamper_evidence(hidden, 1, deciding, CAN)[0]
    gone = {k: v for k, v in genuine().items() if "negative" not in k}
    assert "deciding tests missing" in tamper_evidence(gone, 1, deciding, CAN)[0]
    assert "exited 0" in tamper_evidence({}, 0, deciding, CAN)[0]  # os._exit(0) at import


def junit(**cases: str) -> bytes:
    body = {"passed": "", "failed": "<failure message='x'/>", "xfail":
            "<skipped type='pytest.xfail' message='x'/>", "skipped": "<skipped message='s'/>"}
    xml = "".join(f"<testcase classname='{c.rsplit('.', 1)[0]}' name='{c.rsplit('.', 1)[1]}'>"
                  f"{body[s]}</testcase>" for c, s in cases.items())
    return f"<testsuites><testsuite name='pytest'>{xml}</testsuite></testsuites>".encode()


def test_junit_outcomes_map_node_ids():
    ids = set(F2P + P2P + ["tests/test_core.py::test_add_small[1]"])
    xml = junit(**{"tests.test_core.test_sub_negative": "failed",
                   "tests.test_core.TestSub.test_sub_basic": "xfail",
                   "tests.test_core.test_add_small[1]": "skipped",
                   "tests.test_core.test_other": "passed"})
    assert junit_outcomes(xml, ids) == {F2P[0]: "failed", P2P[0]: "passed",
                                        "tests/test_core.py::test_add_small[1]": "failed",
                                        **{i: "missing" for i in ids - {F2P[0], P2P[0]} - {
                                            "tests/test_core.py::test_add_small[1]"}}}
    assert junit_outcomes(b"<html/>", ids) is None and junit_outcomes(b"<x", ids) is None


def test_junit_ids_with_colons_in_their_parameters_match_pytests_own_report(tmp_path):
    """A parameter id may hold `::` (sqlparse: `test_x[( :: )-options2]`): pytest's JUnit writer
    splits the node id before its parameters only, and so must the grader, or every such test
    reads 'missing' and a correct run reads tampered."""
    import subprocess
    import sys

    (tmp_path / "test_p.py").write_text(
        "import pytest\n"
        "@pytest.mark.parametrize('s', ['( :: )', 'a::b::c'])\n"
        "def test_parse(s):\n    assert s\n"
        "class TestK:\n"
        "    @pytest.mark.parametrize('s', ['x::y'])\n"
        "    def test_k(self, s):\n        assert False\n")
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "--junitxml=report.xml", "test_p.py"], cwd=tmp_path, capture_output=True,
                   check=False)
    ids = {"test_p.py::test_parse[( :: )]", "test_p.py::test_parse[a::b::c]",
           "test_p.py::TestK::test_k[x::y]"}
    assert junit_outcomes((tmp_path / "report.xml").read_bytes(), ids) == {
        "test_p.py::test_parse[( :: )]": "passed", "test_p.py::test_parse[a::b::c]": "passed",
        "test_p.py::TestK::test_k[x::y]": "failed"}


def test_junit_finds_ids_the_log_parser_cut_at_a_space(tmp_path):
    """swebench's log parser cuts `test_seq[\\x1b]133;A\\x07$ prompt]` at its space, and the task
    lists hold what it read (`test_seq[\\x1b]133;A\\x07$`, a `]` inside and none at the end):
    the JUnit lookup must find the whole test for it, or a correct run reads tampered."""
    import subprocess
    import sys

    (tmp_path / "test_w.py").write_text(
        "import pytest\n"
        "@pytest.mark.parametrize('s', ['\\x1b]133;A\\x07$ prompt', 'b c'])\n"
        "def test_seq(s):\n    assert s != 'b c'\n")
    run = subprocess.run([sys.executable, "-m", "pytest", "-rA", "-p", "no:cacheprovider",
                          "--junitxml=report.xml", "test_w.py"], cwd=tmp_path,
                         capture_output=True, text=True, check=False)
    cut = {line.split()[1] for line in run.stdout.splitlines()
           if line.startswith(("PASSED ", "FAILED "))}
    assert cut == {"test_w.py::test_seq[\\x1b]133;A\\x07$", "test_w.py::test_seq[b"}
    assert junit_outcomes((tmp_path / "report.xml").read_bytes(), cut) == {
        "test_w.py::test_seq[\\x1b]133;A\\x07$": "passed", "test_w.py::test_seq[b": "failed"}


def test_junit_must_agree_with_the_log():
    ok = {"junit": {k: "failed" if "drop" in k else "passed" for k in genuine()}}
    assert tamper_evidence(genuine(), 1, F2P + P2P, {**CAN, **ok}) == []
    lie = {"junit": {**ok["junit"], F2P[0]: "failed"}}
    assert "the JUnit report failed" in tamper_evidence(genuine(), 1, F2P + P2P, {**CAN, **lie})[0]
    missing = tamper_evidence(genuine(), 1, F2P + P2P, {**CAN, "junit": None})
    assert missing == ["the JUnit report is missing or unreadable"]
    # a deciding test the grader looked up and the report lacks is evidence; an id nobody looked
    # up (the log graded again with lists derived after the run, as task synthesis does) is not
    looked_up = {k: v for k, v in ok["junit"].items() if k != P2P[0]}
    absent = tamper_evidence(genuine(), 1, F2P + P2P,
                             {**CAN, "junit": {**looked_up, P2P[0]: "missing"}})
    assert absent and "the JUnit report missing" in absent[0]
    assert tamper_evidence(genuine(), 1, F2P + P2P, {**CAN, "junit": looked_up}) == []


def test_tampered_log_is_graded_tampered_and_flags_are_read_back():
    t = Task(instance_id="d", repo="d/d", problem_statement="x", image="i",
             FAIL_TO_PASS=F2P, PASS_TO_PASS=P2P)
    out = "".join(f"PASSED {k}\n" for k in genuine())  # the must-fail canary "passed"
    verdict = {"phase": "tests", "exit_code": 0, "timed_out": False, **CAN, "flags": ["x"]}
    log = f"{g.START_TEST_OUTPUT}\n{out}{g.END_TEST_OUTPUT}\n{g.VERDICT}{json.dumps(verdict)}\n"
    r = g.regrade_from_log(t, log)
    assert r.status == GradeStatus.tampered and r.cause == "tampered"
    assert r.reason.startswith("tampered: canary")
    assert g.reward_of(r) == 0.0 and not g.is_infra(r) and r.flags == ["x"]
    assert set(r.tests) == set(F2P + P2P)  # the canaries are the grader's, not the task's


def test_runner_flags():
    patch = ("diff --git a/pkg/__init__.py b/pkg/__init__.py\n--- a/pkg/__init__.py\n"
             "+++ b/pkg/__init__.py\n@@ -1,1 +1,3 @@\n import os\n+import _pytest.reports\n"
             "+os._exit(0)\n"
             "diff --git a/tests/__init__.py b/tests/__init__.py\nnew file mode 100644\n"
             "--- /dev/null\n+++ b/tests/__init__.py\n@@ -0,0 +1,1 @@\n+x = 1\n")
    assert runner_flags(patch) == ["_pytest in pkg/__init__.py", "os._exit in pkg/__init__.py",
                                   "test file: tests/__init__.py"]
    removed = patch.replace("+import _pytest.reports\n+os._exit(0)\n", "-import sys\n")
    assert runner_flags(removed.replace("+1,3", "+1,1").replace("-1,1", "-1,2")) == [
        "test file: tests/__init__.py"]


def test_tampered_grades_are_counted_in_step_metrics_and_eval_reports():
    from swefleet.evals.report import build_report, report_markdown
    from swefleet.orchestrator.metrics import rollout_metrics

    from swefleet.types import EpisodeStatus, GradeResult, Trajectory

    def traj(status: GradeStatus | None, flags=()) -> Trajectory:
        grade = GradeResult(instance_id="t", status=status, flags=list(flags)) if status else None
        return Trajectory(episode_id="e", task_id="t", status=EpisodeStatus.unresolved,
                          reward=0.0, grade=grade)

    trajs = [traj(GradeStatus.tampered, ["os._exit in p.py"]), traj(GradeStatus.tampered),
             traj(GradeStatus.unresolved, ["sys.exit in cli.py"]), traj(None)]
    m = rollout_metrics(trajs, trained_version=0)
    assert m["rollout/grade_tampered"] == 2 and m["rollout/grade_flagged"] == 2
    records = [{"task_id": "t", "resolved": False, "grade": {"status": s}}
               for s in ("tampered", "unresolved")] + [{"task_id": "u", "resolved": True}]
    report = build_report(records, k=1)
    assert report["tampered"] == 1 and "tampered grades: 1" in report_markdown(report)


def test_a_test_directory_gets_canaries_in_up_to_three_of_its_test_files():
    from types import SimpleNamespace

    from swefleet.envs.tamperrun import _python_test_files

    listing = b"\0".join([b"tests/__init__.py", b"tests/conftest.py", b"tests/helpers.py",
                          *(f"tests/test_{i}.py".encode() for i in range(5)), b"tests/x_test.py"])
    calls = []

    def exec_run(cmd, workdir=None):
        calls.append(cmd[-1])
        return SimpleNamespace(exit_code=0, output=listing)

    t = Task(instance_id="d", repo="d/d", problem_statement="x", image="i",
             test_files=["tests", "other/test_one.py"])
    session = SimpleNamespace(task=t, container=SimpleNamespace(exec_run=exec_run))
    files = _python_test_files(session, random.Random(0))
    assert files[-1] == "other/test_one.py" and len(files) == 4 and len(calls) == 1
    assert all(f.startswith(("tests/test_", "tests/x_test")) for f in files[:3])
    django = SimpleNamespace(task=t.model_copy(update={"log_parser": "django"}), container=None)
    assert _python_test_files(django, random.Random(0)) == ["tests", "other/test_one.py"]
