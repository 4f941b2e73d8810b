"""`swefleet replay` against real sandboxes: an oracle run of two quickstart tasks (recorded
through the bash scaffold, `swefleet.app.oracle_run`) restored at its first and last turn, a
doctored record reported by `--check`, Ctrl-C and the end of the command leaving no container,
bad input refused before any sandbox, the bwrap backend and the interactive shell."""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.sandbox_backends import require

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
SWEFLEET = str(Path(sys.executable).with_name("swefleet"))


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    from swefleet.envs.images import DEFAULT_BASE_IMAGE, image_exists

    from swefleet.app.oracle_run import record_oracle_run

    if not image_exists(DEFAULT_BASE_IMAGE):
        pytest.skip(f"base image {DEFAULT_BASE_IMAGE} missing: run `make base-image`")
    out = tmp_path_factory.mktemp("replay") / "oracle-run"
    record_oracle_run(out, REPO / "envs/data/quickstart/tasks.jsonl", n=2)
    return out


def _episodes(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]


def _replay(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([SWEFLEET, "replay", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, check=False, stdin=subprocess.DEVNULL)


def _owned_by(pid: int) -> list:
    from swefleet.envs.containers import docker_client

    owner = f"{socket.gethostname()}:{pid}"
    return docker_client().containers.list(all=True, filters={"label": f"swefleet.owner={owner}"})


def _copy_with(run: Path, dest: Path, edit) -> Path:
    """A copy of the run folder whose first episode's turns `edit` changed."""
    shutil.copytree(run, dest)
    episodes = _episodes(run)
    edit(episodes[0]["turns"])
    (dest / "episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    return dest


@pytest.mark.parametrize("turn", ["first", "last"])
def test_restore_gives_the_recorded_patch_and_leaves_nothing(run_dir, tmp_path, turn):
    ep = _episodes(run_dir)[0]
    k = 0 if turn == "first" else len(ep["turns"]) - 1  # the oracle applies its patch at turn 0
    out = tmp_path / "restore.json"
    proc = subprocess.Popen([SWEFLEET, "replay", str(run_dir), "--episode", ep["episode_id"],
                             "--turn", str(k), "--no-shell", "--json", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    record = json.loads(out.read_text())
    assert record["patch"] == ep["model_patch"] and ep["model_patch"].strip()
    assert record["replayed_turns"] == k + 1 and record["match_share"] == 1.0
    assert record["restore_s"] >= record["sandbox_s"] > 0
    assert " M textkit/" in stdout and "1 file changed" in stdout, stdout  # git status, --stat
    assert not _owned_by(proc.pid)


def test_check_reports_mismatches_before_and_after_normalising(run_dir, tmp_path):
    def doctor(turns: list[dict]) -> None:
        turns[0]["observation"] = turns[0]["observation"].replace("<output>\n", "<output>\nX\n")
        turns[1]["action"] = 'echo "done in 0.1234s on $(date -Is)"'  # figures that vary
        turns[1]["observation"] = ("<returncode>0</returncode>\n<output>\n"
                                   "done in 3.5s on 2001-02-03T04:05:06+00:00\n\n</output>")

    run = _copy_with(run_dir, tmp_path / "run", doctor)
    done = _replay(run, "--check", "--max-workers", "2")
    assert done.returncode == 0, done.stderr
    report = json.loads((run / "replay_check.json").read_text())
    assert (report["episodes"], report["episodes_replayed"], report["turns"]) == (2, 2, 4)
    assert report["episode_match_share"] == {"raw": 0.5, "normalised": 0.5}
    assert report["turn_match_share"] == {"raw": 0.5, "normalised": 0.75}
    assert report["mismatch_kinds"] == {"dates": 1, "other": 1, "timing": 1}
    first = next(m for m in report["mismatches"] if m["turn"] == 0)
    assert (first["recorded"], first["replayed"], first["normalised_match"]) == ("X", "", False)
    assert "turns matching:    50.0% raw, 75.0% normalised" in done.stdout


def test_ctrl_c_removes_the_sandbox(run_dir, tmp_path):
    def slow(turns: list[dict]) -> None:
        turns[0]["action"] = "sleep 60"

    run = _copy_with(run_dir, tmp_path / "run", slow)
    ep = _episodes(run)[0]["episode_id"]
    # Ctrl-C as in a terminal: a suite started in the background inherits SIGINT ignored, and
    # so would the command; a handler here becomes the default disposition across exec
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        proc = subprocess.Popen([SWEFLEET, "replay", str(run), "--episode", ep, "--no-shell"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    finally:
        signal.signal(signal.SIGINT, previous)
    deadline = time.monotonic() + 60
    while not _owned_by(proc.pid) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.2)
    assert _owned_by(proc.pid), "no sandbox was made"
    time.sleep(1.0)  # the replay is in its `sleep 60` now
    proc.send_signal(signal.SIGINT)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert stderr.rstrip().splitlines()[-1] == "swefleet replay: interrupted (SIGINT)", stderr
    assert not _owned_by(proc.pid)


def test_bad_input_is_one_line_and_exit_2(run_dir, tmp_path):
    ep = _episodes(run_dir)[0]
    n = len(ep["turns"])
    cases = [
        ((tmp_path / "nope", "--episode", "x"), "no such run folder"),
        ((tmp_path, "--episode", "x"), "not a run folder (no config.json)"),
        ((run_dir, "--episode", "nope"), "no episode 'nope'"),
        ((run_dir, "--episode", ep["episode_id"], "--turn", n), f"has turns 0..{n - 1}"),
        ((run_dir, "--episode", ep["episode_id"], "--turn", -1), f"has turns 0..{n - 1}"),
        ((run_dir,), "--episode ID is needed"),
        ((run_dir, "--check", "--turn", 0), "--check replays whole episodes"),
    ]
    for args, words in cases:
        done = _replay(*args)
        assert done.returncode == 2, (args, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("swefleet replay: error: "), lines
        assert words in lines[0], lines
        assert "restored" not in done.stdout


def test_restore_on_bwrap(run_dir, tmp_path):
    require("bwrap")
    ep = _episodes(run_dir)[1]
    out = tmp_path / "restore.json"
    done = _replay(run_dir, "--episode", ep["episode_id"], "--backend", "bwrap", "--no-shell",
                   "--json", out)
    assert done.returncode == 0, done.stderr
    record = json.loads(out.read_text())
    assert record["backend"] == "bwrap" and record["match_share"] == 1.0
    assert record["patch"] == ep["model_patch"]


@pytest.mark.skipif(shutil.which("script") is None, reason="needs `script` for a terminal")
@pytest.mark.parametrize("backend", ["docker", "bwrap"])
def test_interactive_shell_is_in_the_restored_workdir(run_dir, backend):
    if backend == "bwrap":
        require("bwrap")
    ep = _episodes(run_dir)[0]["episode_id"]
    command = f"{SWEFLEET} replay {run_dir} --episode {ep} --turn 0 --backend {backend}"
    proc = subprocess.Popen(["script", "-qec", command, "/dev/null"], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    time.sleep(0.5)  # (input typed ahead waits in the terminal for the shell)
    out, _ = proc.communicate("echo INSIDE-$(id -un)-$(pwd); git diff --stat; exit\n",
                              timeout=120)
    assert proc.returncode == 0, out
    assert "a shell in the sandbox at turn 0" in out
    assert "INSIDE-agent-/testbed" in out and "1 file changed" in out, out
