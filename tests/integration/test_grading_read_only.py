"""The tests run with the repository read-only to them, on both backends (real sandboxes).

The gold patch of a quickstart task, plus package code that (imported by pytest) tries to write
the repository, a test file's bytecode folder, `.git`, its home, to make a test file writable
again and to make a user namespace (where it could mount over the read-only tree), and raises
if any of it works, resolves on Docker and on bwrap; `/tmp` stays writable. With
`read_only_tests = false` the same probe fails the gold patch, so it can tell. The removal of
bytecode caches before the tests is run on a tree of its own."""

from __future__ import annotations

import subprocess

import pytest
from swefleet.envs.backends import make_grader
from swefleet.envs.config import FarmConfig, GradingConfig
from swefleet.envs.grading import _READ_ONLY, _REMOVE_CACHES

from swefleet.types import GradeStatus
from tests.integration.sandbox_backends import BACKENDS, require
from tests.integration.test_envs_grading_docker import (
    RUN_ID,
    bundled_tasks,
    containers_of_run,
    edit_patch,
    slug_task,
)

pytestmark = pytest.mark.integration

PROBE = '''

def _probe_writes():
    import ctypes
    import os
    import sys

    if "_pytest" not in sys.modules:
        return
    wrote = []
    for path in ("x.txt", "textkit/x.txt", "tests/x.txt", "tests/__pycache__/x.pyc", ".git/x",
                 os.path.expanduser("~/x.txt")):
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(path, "w") as f:
                f.write("x")
            wrote.append(path)
        except OSError:
            pass
    for path in ("tests/test_slug.py", "textkit", "."):
        try:
            os.chmod(path, 0o777)
            wrote.append(f"chmod {path}")
        except OSError:
            pass
    if ctypes.CDLL(None, use_errno=True).unshare(0x10000000) == 0:  # CLONE_NEWUSER
        wrote.append("a user namespace")
    if not sys.flags.dont_write_bytecode:
        wrote.append("bytecode writes on")
    with open("/tmp/swefleet-probe.txt", "w") as f:  # /tmp stays writable
        f.write("x")
    if wrote:
        raise RuntimeError(f"the tests could write: {wrote}")


_probe_writes()
'''


def grade(backend: str, grading: GradingConfig):
    """The gold patch with the probe, graded once on `backend`."""
    task = slug_task(bundled_tasks())
    config = FarmConfig(backend=backend, grading=grading)
    grader = make_grader(RUN_ID, config, timeout_s=60)
    try:
        return grader.grade_sync(task, edit_patch(task, "textkit/__init__.py",
                                                  lambda s: s + PROBE) + task.patch)
    finally:
        grader.close()
        assert containers_of_run() == [], "grading left containers behind"


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_tests_cannot_write_the_repository(backend):
    require(backend)
    r = grade(backend, GradingConfig())
    assert r.status == GradeStatus.resolved, r.log[-3000:]
    assert ">>>>> bytecode caches removed, repository read-only: exit 0" in r.log


def test_the_probe_fails_when_the_tests_may_write():
    r = grade("docker", GradingConfig(read_only_tests=False))
    assert r.status == GradeStatus.unresolved, r.log[-3000:]
    assert "the tests could write: ['x.txt', 'textkit/x.txt', 'tests/x.txt'" in r.log


def test_bytecode_caches_are_removed_but_not_from_git(tmp_path):
    """Every `__pycache__` (a link of that name too, not what it points to) and `*.pyc` of the
    tree go; `.git` and other files stay."""
    outside = tmp_path / "outside"
    (outside / "__pycache__").mkdir(parents=True)
    (outside / "__pycache__" / "kept.pyc").write_bytes(b"x")
    repo = tmp_path / "repo"
    for path in ("pkg/__pycache__/mod.cpython-311.pyc", "tests/__pycache__/t.pyc",
                 "tests/sub/stale.pyc", "pkg/mod.py", ".git/objects/x.pyc", "README"):
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(b"x")
    (repo / "docs").mkdir()
    (repo / "docs" / "__pycache__").symlink_to(outside / "__pycache__")
    subprocess.run(["bash", "-c", _REMOVE_CACHES], cwd=repo, check=True)
    left = sorted(str(p.relative_to(repo)) for p in repo.rglob("*") if not p.is_dir())
    assert left == [".git/objects/x.pyc", "README", "pkg/mod.py"]
    assert (outside / "__pycache__" / "kept.pyc").exists()


def test_read_only_changes_only_the_entries_others_could_write_or_not_read(tmp_path):
    """Group- or other-writable entries lose that; unreadable ones, and runnable ones others
    cannot run, gain it; an entry that is already right is not touched (its change time
    stays), and a link's target is not changed through it."""
    import os

    repo, outside = tmp_path / "repo", tmp_path / "outside.txt"
    modes = {"shared.txt": 0o666, "run.sh": 0o744, "private": 0o700, "plain.txt": 0o644,
             "group.py": 0o664}
    repo.mkdir()
    for name, mode in modes.items():
        path = repo / name
        path.mkdir() if name == "private" else path.write_text("x")
        path.chmod(mode)
    outside.write_text("x")
    outside.chmod(0o666)
    (repo / "link").symlink_to(outside)
    changed_at = os.stat(repo / "plain.txt").st_ctime_ns
    subprocess.run(["bash", "-c", _READ_ONLY], cwd=repo, check=True)
    got = {name: (repo / name).stat().st_mode & 0o777 for name in modes}
    assert got == {"shared.txt": 0o644, "run.sh": 0o755, "private": 0o755, "plain.txt": 0o644,
                   "group.py": 0o644}
    assert os.stat(repo / "plain.txt").st_ctime_ns == changed_at
    assert outside.stat().st_mode & 0o777 == 0o666
