"""Console output reads the same in a file as in a terminal: on a file or pipe no line is wrapped
or cut, no cell loses digits, no colour codes, no progress bars (plain lines instead); on a TTY
the bars and rules are still drawn."""

import io
import os
import re
import sys

import pytest
from swefleet.orchestrator.summary import print_summary

from swefleet.app.demo import _Stages
from swefleet.app.stage_bar import StageBar
from swefleet.console import banner, make_console, make_progress
from swefleet.rundir import RunDir, append_jsonl

pytestmark = pytest.mark.unit
LONG = "/checkpoints/" + "/".join(f"part{i:02d}-of-a-deep-run-folder" for i in range(8))


@pytest.fixture(autouse=True)
def narrow_env(monkeypatch):
    """A narrow COLUMNS, as a small terminal or CI would leave behind: it must not matter."""
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.delenv("FORCE_COLOR", raising=False)


def _lines(text: str) -> list[str]:
    assert "…" not in text and "\x1b" not in text, text
    return text.splitlines()


def test_rl_table_in_a_file_is_whole(tmp_path, capsys):
    run = RunDir(tmp_path / LONG.strip("/"))
    for status in ("resolved", "unresolved", "error"):
        append_jsonl(run.episodes, {"status": status, "timings": {"total": 2.0}})
    append_jsonl(run.trainer_metrics, {"loss": 0.000123456789, "mismatch_kl": 2.5e-5,
                                       "staleness_kl": 0.0312, "stale_token_fraction": 0.25})
    step = {"step": 0, "time/step_s": 1234.5, "rollout/episodes": 3,
            "rollout/reward_mean": 0.3333, "rollout/status/resolved": 1,
            "rollout/status/unresolved": 1, "rollout/status/error": 1}
    print_summary(run, [step], wall_s=1234.5, served_version=1)
    lines = _lines(capsys.readouterr().out)
    assert lines[0] == f"swefleet run {run.root}"  # the title, whole on one line
    header = next(x for x in lines if x.startswith("┃"))
    assert [c.strip() for c in header.split("┃")[1:-1]] == [
        "step", "time s", "episodes", "reward", "statuses", "loss", "mismatch KL",
        "staleness KL", "stale tokens"]
    rows = [x for x in lines if x.startswith("│")]
    assert len(rows) == 1  # one step, one line: nothing wrapped
    assert [c.strip() for c in rows[0].split("│")[1:-1]] == [
        "0", "1234.5", "3", "0.33", "resolved=1, unresolved=1, error=1", "0.0001235", "2.5e-05",
        "0.0312", "25%"]
    assert lines[-1].endswith(f"wall 1234.5s; outputs in {run.root}")


def test_stage_banner_in_a_file_keeps_the_long_checkpoint_path(tmp_path, capsys):
    stages = _Stages(tmp_path, ["sft", "rl"], make_console(stderr=True))
    assert stages.start("rl", f"RL (40 steps from {LONG})", done=False)
    assert _lines(capsys.readouterr().err) == [f"── stage 2/2: RL (40 steps from {LONG}) ──"]


def test_progress_in_a_file_is_one_plain_line_at_the_end(capsys):
    bar = StageBar("oracle trajectories", 3)
    for _ in range(3):
        bar.advance()
    assert capsys.readouterr().err == ""  # no bar, no line before a minute has passed
    bar.close()
    assert _lines(capsys.readouterr().err) == ["oracle trajectories: 3/3 in 0s"]


def test_progress_in_a_file_says_where_it_is_every_so_often(capsys):
    progress = make_progress(every_s=0.0, stderr=False)
    task = progress.add_task("eval", total=2)
    progress.start()
    progress.update(task, advance=1, description="eval resolved=1")
    progress.advance(task)
    progress.stop()
    assert _lines(capsys.readouterr().out) == [
        "eval resolved=1: 1/2 in 0s", "eval resolved=1: 2/2 in 0s", "eval resolved=1: 2/2 in 0s"]


def _read_all(master: int) -> str:
    """Everything written to the pty so far: a single read may return only part of it."""
    import select

    chunks = []
    while select.select([master], [], [], 0.2)[0]:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the other end is closed and drained
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks).decode()


def test_on_a_tty_the_bar_and_rule_are_drawn(monkeypatch):
    master, replica = os.openpty()
    with os.fdopen(replica, "w") as tty:
        console = make_console(file=tty)
        assert console.is_terminal
        banner(console, "stage 1/2: sft")
        monkeypatch.setattr(sys, "stderr", tty)
        bar = StageBar("sft", 2)
        bar.advance()
        bar.close()
        tty.flush()
        drawn = _read_all(master)
    os.close(master)
    assert "\x1b[" in drawn  # styles and cursor control
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", drawn)
    assert "─" * 10 + " stage 1/2: sft " + "─" * 10 in plain
    assert "━━━" in plain and "1/2" in plain  # the bar


def test_a_file_console_has_no_colour_whatever_the_markup():
    out = io.StringIO()
    make_console(file=out).print("[bold red]step 3[/] " + "x" * 300)
    assert out.getvalue() == "step 3 " + "x" * 300 + "\n"
