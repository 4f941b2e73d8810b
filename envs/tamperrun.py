"""The grader's side of tamper evidence, inside a grading container (`envs/tamper.py` decides).

Before the tests: canaries (`envs/canary.py`) are planted in each test file the grader runs,
from a seed drawn per grading run and never stored; the copies the grader wrote to plant them
are removed with its other files before the tests start. For the tests: pytest writes a JUnit
XML report on a stream only the grader reads (`envs/testrun.py`), whose outcomes of the canaries
and the deciding tests go into the verdict.
"""

from __future__ import annotations

import random
import re
import secrets
import shlex

from swefleet.envs import canary
from swefleet.envs.gradelog import test_files_of

_READ_CAP = 32 << 20
_PER_DIR = 3
_DEFAULT_TEST_FILE = re.compile(r"(?:^|/)(?:test_[^/]*|[^/]*_test)\.py$")


def read_bytes(container, workdir: str, path: str) -> bytes | None:
    """The first 32 MiB of `path` in the container, or None when it cannot be read."""
    script = f"set -o pipefail; head -c {_READ_CAP} -- {shlex.quote(path)} 2>/dev/null"
    res = container.exec_run(["bash", "-c", script], workdir=workdir)
    return res.output or b"" if res.exit_code == 0 else None


def plant_canaries(session, scratch: str, tar_files) -> dict:
    """Plant canaries in the task's Python test files (the test patch applied); the verdict's
    `canaries` entry ({} when none could be planted). `tar_files`: the grader's tar builder."""
    task = session.task
    rng = random.Random(secrets.randbits(128))
    planted, must_pass, must_fail = {}, [], []
    for path in _python_test_files(session, rng):
        if not canary.applies_to(task.log_parser, path):
            continue
        raw = read_bytes(session.container, task.workdir, path)
        try:
            text = raw.decode() if raw is not None and len(raw) < _READ_CAP else None
        except UnicodeDecodeError:
            text = None
        done = canary.plant(text, path, rng) if text is not None else None
        if done is None:
            continue
        planted[path] = done[0]
        must_pass += done[1]
        must_fail += done[2]
    if not planted:
        session.lines.append(">>>>> Canaries: none planted")
        return {}
    names = {path: f"canary-{i}.py" for i, path in enumerate(planted)}
    session.container.put_archive("/tmp", tar_files({names[p]: t for p, t in planted.items()}))
    script = " && ".join(f"cat {scratch}/{names[p]} > {shlex.quote(p)}" for p in planted)
    if not session._sh(script, f"canaries planted in {len(planted)} test files"):
        return {}
    return {"canaries": {"pass": must_pass, "fail": must_fail}}


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
