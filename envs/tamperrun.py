"""The grader's side of tamper evidence, inside a grading container (`envs/tamper.py` decides).

Before the tests: canaries (`envs/canary.py`) are planted in each test file the grader runs, and
each FAIL_TO_PASS test is renamed and given must-fail twins (`envs/canary_twins.py`), from a seed
drawn per grading run and never stored; the copies the grader wrote to plant them
are removed with its other files before the tests start. For the tests: pytest writes a JUnit
XML report on a stream only the grader reads (`envs/testrun.py`), whose outcomes of the canaries,
twins and deciding tests go into the verdict; the output and the report name the renamed tests
by their original ids (`task_view`).
"""

from __future__ import annotations

import random
import re
import secrets
import shlex

from swefleet.envs import canary, canary_ids, canary_twins
from swefleet.envs.behaviour import probes_of, unfavoured
from swefleet.envs.gradelog import test_files_of
from swefleet.envs.protocol import InfraError
from swefleet.envs.tamper import junit_outcomes

_READ_CAP = 32 << 20
_PER_DIR = 3
_DEFAULT_TEST_FILE = re.compile(r"(?:^|/)(?:test_[^/]*|[^/]*_test)\.py$")


def read_bytes(container, workdir: str, path: str, attempts: int = 3) -> bytes | None:
    """`read_files` of one path."""
    return read_files(container, workdir, [path], attempts)[path]


def read_files(container, workdir: str, paths: list[str], attempts: int = 3
               ) -> dict[str, bytes | None]:
    """The first 32 MiB of each of `paths` in the container (None: no such file), in one exec.
    Each file comes back framed by its size and a marker no file holds (a fresh random token);
    a read that comes back other than framed (an exec that returned nothing with exit 0, a file
    shorter than its size) is tried again, then raises `InfraError`: planting into a file read
    as empty would write the grader's tests over the real ones."""
    paths = list(dict.fromkeys(paths))
    if not paths:
        return {}
    for _ in range(attempts):
        token = secrets.token_hex(12)
        script = ('for p in "$@"; do if s=$(stat -L -c %s -- "$p" 2>/dev/null); then '
                  f'printf "%s\\n" "$s"; head -c {_READ_CAP} -- "$p" 2>/dev/null; '
                  f'printf "\\n{token} %s\\n" "$?"; else printf -- "-\\n"; fi; done')
        res = container.exec_run(["bash", "-c", script, "read", *paths], workdir=workdir)
        got = _framed(res.output or b"", paths, token) if res.exit_code == 0 else None
        if got is not None:
            return got
    raise InfraError(f"reading {len(paths)} test file(s) for the grader's plants came back "
                     f"short {attempts} times ({', '.join(paths[:3])}"
                     f"{', ...' if len(paths) > 3 else ''})")


def _framed(out: bytes, paths: list[str], token: str) -> dict[str, bytes | None] | None:
    """The files of a `read_files` exec's output, or None where it is not framed as written."""
    got: dict[str, bytes | None] = {}
    end = f"\n{token} 0\n".encode()
    at = 0
    for path in paths:
        line_end = out.find(b"\n", at)
        if line_end < 0:
            return None
        size, at = out[at:line_end], line_end + 1
        if size == b"-":
            got[path] = None
            continue
        if not size.isdigit():
            return None
        want = min(int(size), _READ_CAP)
        data, at = out[at:at + want], at + want
        if out[at:at + len(end)] != end:
            return None
        got[path], at = data, at + len(end)
    return got if at == len(out) else None


def plant_canaries(session, scratch: str, tar_files) -> dict:
    """Plant canaries in the task's Python test files (the test patch applied), and rename each
    FAIL_TO_PASS test with its twins (`envs/canary_twins.py`); the verdict's `canaries` and
    `twins` entries ({} when nothing could be planted). `tar_files`: the grader's tar builder."""
    task = session.task
    rng = random.Random(secrets.randbits(128))
    canary_files = [p for p in _python_test_files(session, rng)
                    if canary.applies_to(task.log_parser, p)]
    twin_files = _twin_files(task)
    planted, must_pass, must_fail, twins = {}, [], [], canary_twins.Twins()
    lines: dict[str, list[list[int]]] = {}
    # renamed out of their files: no canary takes them
    reserved = canary_ids.function_names([*task.FAIL_TO_PASS, *task.PASS_TO_PASS])
    raw = read_files(session.container, task.workdir, canary_files + twin_files)
    texts = {path: _decoded(data) for path, data in raw.items()}
    spelled = "\n".join(t for t in [task.problem_statement] + [texts[p] for p in twin_files] if t)
    repository = f"{session.repository}\n{task.test_patch}" if session.repository else ""
    probes = {f: unfavoured(p, spelled, repository) for f, p in probes_of(task).items()}
    for path, text in texts.items():
        if text is None:
            continue
        new = text
        if path in twin_files:
            new, got = canary_twins.plant(new, path, task.FAIL_TO_PASS,
                                          [*task.FAIL_TO_PASS, *task.PASS_TO_PASS], rng, probes)
            twins.add(got)
        done = canary.plant(new, path, rng, reserved) if path in canary_files else None
        if done is not None:
            new, must_pass, must_fail = done[0], must_pass + done[1], must_fail + done[2]
        if new != text:
            planted[path] = new
            ours = {i.rpartition("::")[2] for i in [*twins.renamed, *twins.functions, *must_pass,
                                                    *must_fail] if i.split("::", 1)[0] == path}
            lines[path] = canary_twins.planted_lines(new, ours)
    if twins.renamed or twins.kept:
        session.lines.append(_twins_line(twins))
    if not planted:
        session.lines.append(">>>>> Canaries: none planted")
        return {}
    names = {path: f"canary-{i}.py" for i, path in enumerate(planted)}
    session.container.put_archive("/tmp", tar_files({names[p]: t for p, t in planted.items()}))
    script = " && ".join(f"cat {scratch}/{names[p]} > {shlex.quote(p)}" for p in planted)
    if not session._sh(script, f"canaries planted in {len(planted)} test files"):
        return {}
    out = {"canaries": {"pass": must_pass, "fail": must_fail}, "planted": lines}
    return {**out, "twins": twins.as_dict()} if twins.renamed else out


def _decoded(raw: bytes | None) -> str | None:
    """A file's text, or None: missing, not UTF-8, or longer than the read's cap."""
    try:
        return raw.decode() if raw is not None and len(raw) < _READ_CAP else None
    except UnicodeDecodeError:
        return None


def _twin_files(task) -> list[str]:
    """The Python files of the task's FAIL_TO_PASS tests that its test command runs (listed,
    or in a listed directory)."""
    runs = test_files_of(task)
    out = []
    for test_id in task.FAIL_TO_PASS:
        path = test_id.split("::", 1)[0]
        if "::" in test_id and canary.applies_to(task.log_parser, path) and any(
                path == r or path.startswith(r.rstrip("/") + "/") for r in runs):
            out.append(path)
    return list(dict.fromkeys(out))


def _twins_line(twins: canary_twins.Twins) -> str:
    """The log's account of the renamed deciding tests (the grader's log, not the sandbox's)."""
    kept = "; ".join(f"{f} ({why})" for f, why in sorted(twins.kept.items()))
    return (f">>>>> Twins: {len(twins.renamed)} FAIL_TO_PASS test functions renamed, "
            f"{canary_twins.TWINS} twins each, {len(twins.behaviour)} told apart by a behaviour "
            "probe" + (f"; under their own names: {kept}"[:2000]
                                                  if kept else ""))


def task_view(evidence: dict, output: str, report: bytes, task) -> tuple[str, dict | None]:
    """The run as the task names its tests: the output with renamed tests under their original
    ids (`envs/canary_ids.py`), and the JUnit outcomes of the canaries, twins and deciding tests
    (None: no report) keyed the same way."""
    twins = evidence.get("twins") or {}
    renamed = twins.get("renamed") or {}
    if not report or not evidence:
        return canary_ids.swap_text(output, renamed), None
    canaries, deciding = evidence["canaries"], [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]
    ids = {*canaries["pass"], *canaries["fail"], *deciding,
           *canary_ids.report_ids(twins, deciding)}
    junit = junit_outcomes(report, ids)
    if junit is not None and renamed:  # an original id absent from the run is no news: dropped
        swapped = {canary_ids.swap_id(k, renamed): v for k, v in junit.items()}
        junit = {k: v for k, v in swapped.items()
                 if v != "missing" or canary_ids.function_id(k) not in renamed}
    return canary_ids.swap_text(output, renamed), junit


def _python_test_files(session, rng: random.Random) -> list[str]:
    """The task's test files; for a directory among them, up to `_PER_DIR` of the tracked
    files in it that pytest collects by default (`test_*.py`, `*_test.py`), drawn at random."""
    out = []
    for path in test_files_of(session.task):
        if path.endswith(".py") or canary.parser_key(session.task.log_parser) is None:
            out.append(path)
            continue
        script = (f"test -d {shlex.quote(path)} && git ls-files -z -- {shlex.quote(path)} "
                  "2>/dev/null | head -c 1000000")
        res = session.container.exec_run(["bash", "-c", script], workdir=session.task.workdir)
        names = (res.output or b"").decode(errors="replace").split("\0")
        found = sorted(n for n in names if res.exit_code == 0 and _DEFAULT_TEST_FILE.search(n))
        out += rng.sample(found, min(_PER_DIR, len(found)))
    return list(dict.fromkeys(out))
