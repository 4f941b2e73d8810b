"""Tamper evidence: is the test run the grader saw the run that happened? (no Docker)

A model patch's code runs inside the test process, so no file it may edit can be protected.
The grader therefore checks the run's consistency from outside (`envs/grading.py` collects,
`envs/gradelog.py` decides; all evidence is in the log's verdict line, so a stored log is judged
the same way again):

- canaries (`envs/canary.py`): each must-pass canary PASSED, each must-fail canary FAILED;
- twins (`envs/canary_twins.py`): no twin of a renamed deciding test passes, and nothing is
  reported under the original id of a renamed test (it did not run under that name);
- a canary or twin is missing while a deciding test (FAIL_TO_PASS / PASS_TO_PASS) is reported,
  or a deciding test is missing while the canaries and twins are all reported;
- the runner's exit status: with a must-fail test planted a genuine pytest run exits non-zero;
- pytest's JUnit XML report (written on a stream only the grader reads, `envs/testrun.py`): it
  must exist when the log reports tests, and agree with the log on every canary and deciding
  test.

Any of these makes the grade `tampered` (reward 0). Separately, `runner_flags` lists added
code of the model patch that references test-runner internals, read from its syntax tree with
names built of string constants folded (`envs/patchcode.py`); they are recorded
(`GradeResult.flags`), never failed on by themselves: a real fix may need them (pytest's own
repository, a CLI's `sys.exit`).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from swefleet.envs.canary_ids import function_id, node_parts
from swefleet.envs.patchcode import names_in
from swefleet.envs.patchfiles import split_patch

#: (label, pattern) of added lines that reach into the test runner or the interpreter's start.
RUNNER_PATTERNS = (
    ("_pytest", re.compile(r"\b_pytest\b")),
    ("pytest hook", re.compile(r"\bpytest_[a-z_]+")),
    ("pytest plugin manager", re.compile(r"\bpluginmanager\b|\bpytest_plugins\b")),
    ("sys.exit", re.compile(r"\bsys\.exit\b")),
    ("os._exit", re.compile(r"\bos\._exit\b|\b_exit\s*\(")),
    ("atexit", re.compile(r"\batexit\b")),
    ("unittest.TestResult", re.compile(r"\bTestResult\b|\bTextTestRunner\b")),
    ("conftest", re.compile(r"conftest")),
    ("sitecustomize", re.compile(r"\b(?:site|user)customize\b")),
    (".pth", re.compile(r"\.pth\b")),
    ("PYTEST_ env", re.compile(r"\bPYTEST_[A-Z_]+")),
    ("gc.get_objects", re.compile(r"\bget_objects\b|\bget_referrers\b")),
)
_TEST_PATH = re.compile(r"(?:^|/)(?:tests?|testing)/|(?:^|/)test_[^/]*\.py$|_tests?\.py$")
_PASSING = ("PASSED", "XFAIL")
_XML_CAP = 32 << 20
_XML_DECL = re.compile(rb"(?=<\?xml\s)")


def runner_flags(patch: str) -> list[str]:
    """`label in path` for each added line of `patch` that matches `RUNNER_PATTERNS` (test files
    included: they are reset, but a test helper is not), and `test file: path` for each file of
    the patch that looks like a test file; sorted, without duplicates."""
    flags = set()
    for f in split_patch(patch):
        path = f.new or f.old or "?"
        if f.paths and any(_TEST_PATH.search(p) for p in f.paths):
            flags.add(f"test file: {path}")
        blocks = _added_blocks(f.text)
        text = "\n".join(blocks)
        if path.endswith(".py"):  # names built at run time, folded (`envs/patchcode.py`)
            text += "\n" + "\n".join(names_in(blocks))
        flags.update(f"{label} in {path}" for label, rx in RUNNER_PATTERNS if rx.search(text))
    return sorted(flags)[:50]


def _added_blocks(file_diff: str) -> list[str]:
    """The runs of consecutive added lines of one file's diff, without their `+`."""
    blocks, run = [], []
    for ln in file_diff.split("\n"):
        if ln.startswith("+") and not ln.startswith("+++"):
            run.append(ln[1:])
        elif run:
            blocks.append("\n".join(run))
            run = []
    return blocks + (["\n".join(run)] if run else [])


def junit_id(classname: str, name: str, ids: set[str]) -> str | None:
    """The node id among `ids` that pytest's JUnit XML writes as (`classname`, `name`):
    `tests/test_x.py::TestA::test_b[1]` -> (`tests.test_x.TestA`, `test_b[1]`)."""
    return _junit_keys(ids).get((classname, name))


def _junit_keys(ids: set[str]) -> dict[tuple[str, str], str]:
    return {key: node_id for node_id in ids if (key := _junit_key(node_id))}


def _junit_key(node_id: str) -> tuple[str, str] | None:
    """(`classname`, `name`) as pytest's JUnit writer spells `node_id`; None for a bare path."""
    parts = node_parts(node_id)
    if len(parts) < 2:
        return None
    path = parts[0].removesuffix(".py").replace("/", ".")
    return ".".join([path, *parts[1:-1]]), parts[-1]


def junit_collect_errors(xml: bytes) -> list[str]:
    """The test files (`a/b/test_x.py` as pytest's JUnit writer dots them: `a.b.test_x`) that
    the JUnit report `xml` records as failing to collect with a NameError; [] when none or when
    it is no report."""
    if not xml or len(xml) > _XML_CAP:
        return []
    out = []
    for doc in (d for d in _XML_DECL.split(xml) if d.strip()):
        try:
            root = ET.fromstring(doc)
        except ET.ParseError:
            return []
        for case in root.iter("testcase"):
            error = case.find("error")
            if error is None or error.get("message") != "collection failure":
                continue
            if "NameError" in (error.text or ""):
                out.append(".".join(p for p in (case.get("classname"), case.get("name")) if p))
    return out


def junit_outcomes(xml: bytes, ids: set[str]) -> dict[str, str] | None:
    """`passed` / `failed` per id of `ids` the JUnit XML report `xml` holds (an xfail counts as
    passed, as swebench counts XFAIL), `missing` for those it lacks, or None when it is not a
    JUnit report. `xml` may hold several reports one after the other (a test command that runs
    pytest more than once): a test failed in any of them failed."""
    if len(xml) > _XML_CAP:
        return None
    roots = []
    for doc in (d for d in _XML_DECL.split(xml) if d.strip()):
        try:
            roots.append(ET.fromstring(doc))
        except ET.ParseError:
            return None
    if not roots or any(r.tag not in ("testsuites", "testsuite") for r in roots):
        return None
    keys = _junit_keys(ids)
    out: dict[str, str] = {}
    cases = [c for root in roots for c in root.iter("testcase")]
    for case in cases:
        node_id = keys.get((case.get("classname", ""), case.get("name", "")))
        if node_id is not None and out.get(node_id) != "failed":  # a test reported twice
            out[node_id] = _case_outcome(case)  # (call + teardown) fails once
    for node_id in ids:
        if node_id not in out and is_cut_id(node_id):
            whole = _whole_outcomes(cases, node_id)
            if whole:
                out[node_id] = "failed" if "failed" in whole else "passed"
        out.setdefault(node_id, "missing")
    return out


def is_cut_id(test_id: str) -> bool:
    """An id that swebench's log parser read cut at a space inside its parameters
    (`t.py::test_x[a b]` -> `t.py::test_x[a`), as SWE-bench's own lists hold some: parameters
    opened and not closed at the end."""
    return "[" in test_id and not test_id.endswith("]")


def _whole_outcomes(cases: list, cut_id: str) -> list[str]:
    """The outcomes of the report's tests whose whole id the cut id `cut_id` begins (its
    parameters followed by a space)."""
    key = _junit_key(cut_id)
    if key is None:
        return []
    classname, prefix = key[0], key[1] + " "
    return [_case_outcome(c) for c in cases
            if c.get("classname", "") == classname and c.get("name", "").startswith(prefix)]


def _case_outcome(case) -> str:
    """`passed` or `failed` for one `testcase` element (an xfail passed, as swebench counts)."""
    bad = case.find("failure") is not None or case.find("error") is not None
    skip = case.find("skipped")
    xfail = skip is not None and skip.get("type") == "pytest.xfail"
    return "passed" if not bad and (skip is None or xfail) else "failed"


_COLLECT_ERROR = re.compile(r"^_{3,} ERROR collecting (\S+) _{3,}$", re.MULTILINE)
_SECTION_END = re.compile(r"^(?:_{3,} |={3,}|-{3,} )", re.MULTILINE)
_FRAME = re.compile(r"^(\S+?):(\d+): (?:in \S+|\w+)$", re.MULTILINE)


def plant_failure(output: str, verdict: dict) -> str:
    """Why the grader's own planting broke the run ('' when it did not): a planted test file
    failed to collect with a NameError raised on a line the grader wrote (a copied deciding test
    or a canary, `verdict["planted"]`), e.g. a copy placed above a helper its decorators call.
    Such a run says nothing about the patch; a collection error raised elsewhere (the package,
    an import line of the file) is the patch's. The log alone is not enough (the tested code
    can print): the JUnit report must record that file's collection failure too
    (`verdict["collect_errors"]`, `junit_collect_errors`)."""
    planted, reported = verdict.get("planted"), verdict.get("collect_errors")
    if not isinstance(planted, dict) or not isinstance(reported, list):
        return ""
    for m in _COLLECT_ERROR.finditer(output):
        path, rest = m[1], output[m.end():]
        end = _SECTION_END.search(rest)
        section = rest[: end.start() if end else len(rest)]
        frames = _FRAME.findall(section)
        if not frames or frames[-1][0] != path or not re.search(r"^E +NameError\b", section,
                                                                  re.MULTILINE):
            continue
        if re.sub(r"\.py$", "", path).replace("/", ".") not in reported:
            continue  # pytest's own report (out of the tests' reach) must say so too
        line = int(frames[-1][1])
        ranges = planted.get(path) or []
        if any(isinstance(r, list) and len(r) == 2 and r[0] <= line <= r[1] for r in ranges):
            return f"a planted test file failed to collect: {path}:{line}: NameError"
    return ""


def tamper_evidence(status_map: dict[str, str], exit_code: int | None, deciding: list[str],
                    verdict: dict) -> list[str]:
    """Why the run in the log cannot be the run that happened; empty when it is consistent or
    no canary was planted. `verdict`: the log's verdict (`canaries`, `junit`)."""
    canaries, twins = verdict.get("canaries") or {}, verdict.get("twins") or {}
    must_pass, must_fail = list(canaries.get("pass") or []), list(canaries.get("fail") or [])
    twin_fail = list(twins.get("fail") or [])
    if not (must_pass or must_fail or twin_fail):
        return []
    why = []
    for cid in must_pass:
        if cid in status_map and status_map[cid] != "PASSED":
            why.append(f"canary {cid} must pass, reported {status_map[cid]}")
    for cid in must_fail:
        if cid in status_map and status_map[cid] != "FAILED":
            why.append(f"canary {cid} must fail, reported {status_map[cid]}")
    for tid in twin_fail:  # a twin may fail, err or skip where its original does
        if status_map.get(tid) in _PASSING:
            why.append(f"twin {tid} of a deciding test must fail, reported {status_map[tid]}")
    why += _ghosts(status_map, twins.get("renamed") or {})
    missing = [c for c in must_pass + must_fail + twin_fail if c not in status_map]
    seen = [t for t in deciding if t in status_map]
    if missing and seen:
        why.append(f"{len(missing)} canaries or twins missing while {len(seen)} deciding tests "
                   "are reported")
    if not missing and len(seen) < len(deciding):
        why.append(f"{len(deciding) - len(seen)} deciding tests missing although the file ran")
    if exit_code == 0 and (must_fail or twin_fail):
        why.append("the runner exited 0 although a must-fail test was planted")
    why += _junit_evidence(status_map, verdict, must_pass + must_fail + twin_fail + seen)
    return why


def _ghosts(status_map: dict[str, str], renamed: dict[str, str]) -> list[str]:
    """Results the run printed under the original id of a renamed test, which did not run under
    that name (the log shows them under the secret name: `envs/canary_ids.py`)."""
    ghosts = sorted(t for t in status_map if function_id(t) in renamed)
    if not ghosts:
        return []
    example = renamed[function_id(ghosts[0])]
    why = (f"{len(ghosts)} results reported under the name of a renamed deciding test, which did "
           f"not run under it (e.g. {example})")
    return [why]


def _junit_evidence(status_map: dict[str, str], verdict: dict, ids: list[str]) -> list[str]:
    """Tests the log and the JUnit report disagree on. Only ids the grader looked up in the
    report count (the canaries and the deciding tests at grading time: `junit_outcomes` marks
    those the report lacks `missing`); a log graded again with other lists (`regrade_from_log`)
    is not held against ids nobody looked up."""
    if "junit" not in verdict:
        return []  # JUnit collection was off
    junit = verdict["junit"]
    if not isinstance(junit, dict):
        return ["the JUnit report is missing or unreadable"] if status_map else []
    why = []
    for node_id in (i for i in ids if i in status_map):
        logged = "passed" if status_map[node_id] in _PASSING else "failed"
        if node_id not in junit:
            continue
        if junit.get(node_id) != logged:
            why.append(f"{node_id}: the log says {status_map[node_id]}, the JUnit report "
                       f"{junit.get(node_id, 'nothing')}")
    return why[:20]
