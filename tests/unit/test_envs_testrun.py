"""The tests' run captured from its streams (`envs/testrun.py`), with real bash processes."""

from __future__ import annotations

import os
import shlex
import signal
import time

import pytest
from swefleet.envs.testrun import CappedOutput, capture_script, run_in_process

pytestmark = pytest.mark.unit


def test_capped_output_keeps_head_and_tail():
    whole = CappedOutput(100)
    whole.feed(b"a" * 60)
    whole.feed(b"b" * 40)
    assert whole.text() == "a" * 60 + "b" * 40
    cut = CappedOutput(100)
    for _ in range(50):
        cut.feed(b"0123456789")
    assert cut.text() == "0123456789" * 2 + "01234" + "\n[... 400 bytes cut ...]\n" + (
        "56789" + "0123456789" * 7)


def run(command: str, junit: bool = True, kill_rest=lambda: None):
    return run_in_process(["bash", "-c", capture_script(command, junit)], 20, 10_000, kill_rest)


def test_output_and_report_come_back_apart():
    r = run("echo out; echo err >&2; printf '<xml/>' > /dev/fd/3; "
            "test \"$PYTEST_ADDOPTS\" = --junitxml=/dev/fd/3; exit 3")
    assert (r.exit_code, r.output, r.report) == (3, "out\nerr\n", b"<xml/>")
    r = run("echo only", junit=False)
    assert (r.exit_code, r.output, r.report) == (0, "only\n", b"")


def test_a_process_left_behind_is_killed_and_cannot_hold_the_run(tmp_path):
    pid_file = tmp_path / "pid"

    def kill_rest():
        os.kill(int(pid_file.read_text()), signal.SIGKILL)

    started = time.monotonic()
    r = run(f"setsid sleep 30 & echo $! > {pid_file}; echo done", kill_rest=kill_rest)
    assert r.exit_code == 0 and r.output == "done\n"
    assert time.monotonic() - started < 10  # not the 30 s the left-behind process holds it


def test_the_report_is_complete_where_every_process_dies_with_the_first():
    """bwrap's PID namespace kills every process of the box when its first one exits; a copy
    of the report still running then was cut (a gold patch once graded `tampered`, its JUnit
    report missing). Stand-in: the script's process group killed as soon as its shell ends."""
    script = capture_script("( sleep 0.3; printf '<xml/>' > /dev/fd/3 ) & echo ran", True)
    box = (f"setsid bash -c {shlex.quote(script)} & box=$!; wait $box; status=$?; "
           "kill -9 -- -$box 2>/dev/null; exit $status")
    r = run_in_process(["bash", "-c", box], 20, 10_000, lambda: None)
    assert (r.exit_code, r.output, r.report) == (0, "ran\n", b"<xml/>")
