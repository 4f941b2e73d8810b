"""Grading logs: SWE-bench's markers, and the decision read back from a stored log (no Docker).

Everything a grade needs is in its log (SWE-bench markers plus a last `verdict` line that only the
grader writes), so `regrade_from_log(task, log)` reproduces the live grade, e.g. after a task's
test lists are corrected. The tests' output is parsed with the swebench parser named by
`task.log_parser`, and FAIL_TO_PASS / PASS_TO_PASS are decided with swebench's own
`get_eval_tests_report`.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

from swefleet.envs.canary_ids import is_planted
from swefleet.envs.patchfiles import split_patch
from swefleet.envs.tamper import plant_failure, tamper_evidence

from swefleet.types import GradeCause, GradeResult, GradeStatus, Task

# SWE-bench's log markers (swebench.harness.constants), repeated here so that reading a log does
# not import swebench's harness package (which imports docker and datasets, ~2 s).
APPLY_PATCH_FAIL = ">>>>> Patch Apply Failed"
APPLY_PATCH_PASS = ">>>>> Applied Patch"
RESET_FAILED = ">>>>> Reset Failed"
TESTS_TIMEOUT = ">>>>> Tests Timed Out"
START_TEST_OUTPUT = ">>>>> Start Test Output"
END_TEST_OUTPUT = ">>>>> End Test Output"
TEST_EXIT_CODE = ">>>>> Test Exit Code"
#: A file of the model patch that was not applied: it changes protected test infrastructure.
PROTECTED_DROPPED = ">>>>> Protected path dropped from the model patch"
#: The last line of every grading log: JSON written by the grader, never by the tests.
VERDICT = ">>>>> swefleet verdict: "

# The human texts of `GradeResult.reason` (consumers decide on `GradeResult.cause`).
REASON_PATCH = "patch did not apply"
REASON_TIMEOUT = "tests timed out"
REASON_NO_SUITE = "suite did not run"
REASON_INFRA = "infra"
REASON_TAMPERED = "tampered"

#: SWE-bench's NON_TEST_EXTS: files of a test patch that are data, not test files to run.
NON_TEST_EXTS = (
    ".json",
    ".png",
    "csv",
    ".txt",
    ".md",
    ".jpg",
    ".jpeg",
    ".pkl",
    ".yml",
    ".yaml",
    ".toml",
)
_STATUSES = ("PASSED ", "FAILED ", "SKIPPED ", "ERROR ", "XFAIL ")

# ---------------------------------------------------------------------------------------------
# Test files and parsers


def patch_paths(patch: str) -> list[str]:
    """Paths a unified/git diff touches (old and new names), in order, without duplicates;
    names with spaces and C-quoted names are read whole (`envs/patchfiles.py`)."""
    return list(dict.fromkeys(p for f in split_patch(patch) for p in f.paths))


def test_files_of(task: Task) -> list[str]:
    """The test files to run: `task.test_files`, else the test files `test_patch` creates or
    changes (not deletes), without data files (SWE-bench's `get_test_directives`)."""
    if task.test_files:
        return list(task.test_files)
    news = (f.new for f in split_patch(task.test_patch))
    return list(dict.fromkeys(p for p in news if p and not p.endswith(NON_TEST_EXTS)))


def parser_key(name: str) -> str:
    """`pytest` -> `parse_log_pytest` (swebench's PARSER_REGISTRY key); full keys pass through."""
    return name if name.startswith("parse_log_") else f"parse_log_{name}"


def swebench_harness() -> None:
    """Let `swebench.harness.<module>` import without running `swebench/harness/__init__.py`.

    That file imports every harness module up front: docker, `datasets` (pyarrow, pandas,
    huggingface_hub) and modal, ~2 s, and absent on a machine that only grades (a GPU node with
    the bwrap backend). The log parsers, `grading` and `constants` need only the standard
    library and unidiff; with an empty package registered in their place, each submodule still
    loads from swebench's own directory on first import. No-op once the package is imported.
    Grading threads call it at once: one registers the package, the others wait for it."""
    with _HARNESS_LOCK:
        if "swebench.harness" not in sys.modules:
            _register_harness()


_HARNESS_LOCK = threading.Lock()


def _register_harness() -> None:
    import importlib.machinery
    import importlib.util

    import swebench

    spec = importlib.machinery.ModuleSpec("swebench.harness", None, is_package=True)
    spec.submodule_search_locations = [str(Path(swebench.__file__).parent / "harness")]
    package = importlib.util.module_from_spec(spec)
    sys.modules["swebench.harness"] = package
    swebench.harness = package


def get_log_parser(name: str):
    """The swebench log parser called `name` (`pytest`, `django`, `parse_log_sympy`, ...)."""
    swebench_harness()
    from swebench.harness.log_parsers import PARSER_REGISTRY

    try:
        return PARSER_REGISTRY[parser_key(name)]
    except KeyError:
        known = ", ".join(sorted(k.removeprefix("parse_log_") for k in PARSER_REGISTRY))
        raise ValueError(f"unknown log parser {name!r}; known: {known}") from None


def _test_spec(task: Task):
    from swebench.types import TestSpec

    return TestSpec(
        instance_id=task.instance_id,
        image=task.image,
        eval_script_list=[],
        repo=task.repo,
        version=task.version,
        FAIL_TO_PASS=task.FAIL_TO_PASS,
        PASS_TO_PASS=task.PASS_TO_PASS,
        log_parser=parser_key(task.log_parser),
        eval_type=eval_type_of(task),
    )


def eval_type_of(task: Task) -> str:
    """swebench's eval type of the task: its `eval_type` field (SWE-bench rows carry one;
    `fail_only` for runners whose parser records failures only), else `pass_and_fail`."""
    value = (task.model_extra or {}).get("eval_type")
    return value if isinstance(value, str) and value else "pass_and_fail"


# ---------------------------------------------------------------------------------------------
# Deciding from a log (pure: no Docker)


def regrade_from_log(task: Task, log_text: str) -> GradeResult:
    """Grade a stored log again with the task's current FAIL_TO_PASS / PASS_TO_PASS lists."""
    verdict = _read_verdict(log_text)
    result = GradeResult(
        instance_id=task.instance_id, status=GradeStatus.error, cause=GradeCause.infra, log=log_text
    )
    dropped = verdict.get("dropped")
    if isinstance(dropped, list):
        result.dropped_paths = [str(p) for p in dropped]
    if isinstance(verdict.get("flags"), list):
        result.flags = [str(f) for f in verdict["flags"]]
    if verdict.get("phase") == "tests" and not verdict.get("timed_out"):
        _decide_tests(task, _test_output(log_text), verdict.get("exit_code"), result, verdict)
    else:
        result.cause, result.reason = _early_end(verdict)
    return result


def _early_end(verdict: dict) -> tuple[GradeCause, str]:
    """Cause and reason of a grade (status `error`) that ended before the tests decided."""
    phase = verdict.get("phase")
    if phase == "infra":
        return GradeCause.infra, f"{REASON_INFRA}: {verdict.get('error', 'unknown')}"
    if phase == "model_patch":
        return GradeCause.patch_failed, REASON_PATCH
    if phase == "protected":
        paths = ", ".join(str(p) for p in verdict.get("paths", []))[:300]
        return (GradeCause.patch_failed,
                f"{REASON_PATCH}: it changed protected files its headers hide: {paths}")
    if phase == "test_patch":
        return (GradeCause.patch_failed,
                f"{REASON_PATCH}: the test patch conflicts with the model patch")
    if phase == "reset":
        return GradeCause.infra, f"{REASON_INFRA}: could not reset the test files"
    if phase != "tests":
        return GradeCause.infra, f"{REASON_INFRA}: grading log has no verdict line (truncated?)"
    return GradeCause.timeout, REASON_TIMEOUT


def _read_verdict(log_text: str) -> dict:
    last = log_text.rstrip("\n").rpartition("\n")[2]
    if not last.startswith(VERDICT):
        return {}
    try:
        verdict = json.loads(last[len(VERDICT) :])
    except json.JSONDecodeError:
        return {}
    return verdict if isinstance(verdict, dict) else {}


def _test_output(log_text: str) -> str:
    """Between the first start marker and the last end marker (both written by the grader)."""
    _, _, rest = log_text.partition(START_TEST_OUTPUT)
    return rest.rpartition(END_TEST_OUTPUT)[0]


def _with_whole_ids(output: str, status_map: dict[str, str]) -> dict[str, str]:
    """`status_map` plus the whole id of each parametrized test whose id has a space
    (`t.py::test_x[a b]`): swebench's parsers split lines at spaces and keep `t.py::test_x[a`,
    which SWE-bench's own test lists hold, so that key stays too."""
    extra = {}
    for line in output.split("\n"):
        if line.startswith(_STATUSES) and (whole := _whole_id(line)):
            extra[whole] = line.split(" ", 1)[0]
    return {**status_map, **{k: v for k, v in extra.items() if k not in status_map}}


def _whole_id(line: str) -> str | None:
    """`PASSED t.py::test_x[a b]` or `FAILED t.py::test_x[a - b] - Error: [1]` -> the id with
    its spaces; None when the first word is already the whole id (linear time: logs are
    untrusted)."""
    status, _, rest = line.rstrip().partition(" ")
    first = rest.split(" ", 1)[0]
    if "[" not in first or first.endswith("]") or " " not in rest:
        return None
    cut = rest.find("] - ") if status != "PASSED" else -1
    whole = rest[: cut + 1] if cut >= 0 else rest
    return whole if whole.endswith("]") else None


def _decide_tests(task: Task, output: str, exit_code: int | None, result: GradeResult,
                  verdict: dict | None = None) -> None:
    swebench_harness()
    from swebench.harness.constants import EvalType
    from swebench.harness.grading import SUITE_RAN, get_eval_tests_report, get_resolution_status

    status_map = _with_whole_ids(output, get_log_parser(task.log_parser)(output, _test_spec(task)))
    result.tests = {t: st for t, st in status_map.items()  # the task's own
                    if not is_planted(t, verdict or {})}
    deciding = [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]
    if why := plant_failure(output, verdict or {}):  # the grader's fault: never a verdict
        result.status, result.cause = GradeStatus.error, GradeCause.infra
        result.reason = f"{REASON_INFRA}: {why}"
        return
    if why := tamper_evidence(status_map, exit_code, deciding, verdict or {}):
        result.status, result.cause = GradeStatus.tampered, GradeCause.tampered
        result.reason = f"{REASON_TAMPERED}: " + "; ".join(why)[:1000]
        return
    if not status_map and not SUITE_RAN.search(output):
        result.cause = GradeCause.no_suite
        result.reason = f"{REASON_NO_SUITE} (exit code {exit_code}, no test results in the log)"
        return
    if exit_code not in (0, None) and not set(status_map.values()) & {"FAILED", "ERROR"}:
        # swebench's anti-spoofing rule: a failing run that reports no failure is not this run
        result.cause = GradeCause.no_suite
        result.reason = (
            f"{REASON_NO_SUITE} (exit code {exit_code} but no failed test in the "
            "log: the log does not describe the run)"
        )
        return
    gold = {"FAIL_TO_PASS": task.FAIL_TO_PASS, "PASS_TO_PASS": task.PASS_TO_PASS}
    report = get_eval_tests_report(status_map, gold, eval_type=EvalType(eval_type_of(task)))
    result.fail_to_pass = report["FAIL_TO_PASS"]
    result.pass_to_pass = report["PASS_TO_PASS"]
    result.cause = GradeCause.tests
    if get_resolution_status(report) == "RESOLVED_FULL":  # swebench's ResolvedStatus.FULL
        result.status = GradeStatus.resolved
        return
    f2p_bad, p2p_bad = report["FAIL_TO_PASS"]["failure"], report["PASS_TO_PASS"]["failure"]
    result.status = GradeStatus.unresolved
    result.reason = (
        f"{len(f2p_bad)}/{len(task.FAIL_TO_PASS)} FAIL_TO_PASS failed, "
        f"{len(p2p_bad)}/{len(task.PASS_TO_PASS)} PASS_TO_PASS failed"
    )


# ---------------------------------------------------------------------------------------------
# Running in a container


def cap_text(text: str, limit: int) -> str:
    """Keep the head (1/4) and tail (3/4; pytest's summary is at the end) of `text`."""
    if len(text) <= limit:
        return text
    head, tail = limit // 4, limit - limit // 4
    return f"{text[:head]}\n[... {len(text) - head - tail} characters cut ...]\n{text[-tail:]}"


def is_infra(result: GradeResult) -> bool:
    """True when the grading itself failed (Docker, daemon, lost log): the result says nothing
    about the patch and must be retried or excluded, never scored."""
    return result.status == GradeStatus.error and result.cause == GradeCause.infra


def reward_of(result: GradeResult) -> float | None:
    """1.0 resolved; 0.0 unresolved or an error the patch caused (did not apply, tests timed
    out, suite did not run: SWE-bench counts these as not resolved, and excluding them would
    teach a policy to break the suite instead of failing it); None for infra errors."""
    if is_infra(result):
        return None
    return 1.0 if result.status == GradeStatus.resolved else 0.0
