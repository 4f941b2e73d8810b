"""The bwrap backend's namespace probe: a transient failure (a host mount changing while `/`
is bound) is retried, a lasting one says why, and a passed probe is not run again."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from swefleet.envs.bwrap import box
from swefleet.envs.bwrap.box import BwrapMissing, check_tools

pytestmark = pytest.mark.unit


def _fake_bwrap(tmp_path: Path, failures: int) -> tuple[str, Path]:
    """A `bwrap` that fails its first `failures` runs (with bwrap's own message), then passes;
    every run is counted in a file."""
    count = tmp_path / "runs"
    exe = tmp_path / "bwrap"
    exe.write_text(
        "#!/bin/sh\n"
        f'n=$(($(cat {count} 2>/dev/null || echo 0) + 1)); echo $n > {count}\n'
        f'[ $n -gt {failures} ] && exit 0\n'
        "echo \"bwrap: Can't bind mount /oldroot/ on /newroot/: Invalid argument\" >&2; exit 1\n")
    exe.chmod(0o755)
    return str(exe), count


@pytest.fixture(autouse=True)
def _tools(monkeypatch):
    if not all(shutil.which(t) for t in ("nsenter", "prlimit", "setpriv")):
        pytest.skip("util-linux's nsenter, prlimit and setpriv are needed")
    monkeypatch.setattr(box, "_probed", set())


def test_a_probe_that_fails_now_and_then_is_retried_and_then_trusted(tmp_path):
    exe, count = _fake_bwrap(tmp_path, failures=box.PROBE_ATTEMPTS - 1)
    check_tools(exe)
    assert count.read_text().strip() == str(box.PROBE_ATTEMPTS)
    check_tools(exe)  # passed once: not probed again
    assert count.read_text().strip() == str(box.PROBE_ATTEMPTS)


def test_a_probe_that_keeps_failing_says_why(tmp_path):
    exe, count = _fake_bwrap(tmp_path, failures=100)
    with pytest.raises(BwrapMissing, match="cannot create its namespaces.*Can't bind mount"):
        check_tools(exe)
    assert count.read_text().strip() == str(box.PROBE_ATTEMPTS)
    with pytest.raises(BwrapMissing, match="needs"):
        check_tools(str(tmp_path / "no-such-bwrap"))
