"""Ctrl-C (SIGINT) and SIGTERM end a swefleet command in the middle of its work with one line,
exit code 130 or 143, and nothing it started left 5 s after the signal: no container (Docker
backend), no bwrap box (bwrap backend), no process.

`swefleet eval` runs the agent through the scripted chat server (a real loopback process) on the
three held-out quickstart tasks at once, every reply the same command: in textkit-5's sandbox
(its bug tells it) a long `sleep`; in the two others, apply a patch whose tests sleep and submit
it, so their grading runs hang. The signal comes once both kinds of `sleep` run (each with a
number of seconds no other process uses). `swefleet rl` (the quickstart: its own inference
server and trainer) gets SIGTERM once its sandboxes run.
"""

from __future__ import annotations

import difflib
import json
import re
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest
from swefleet.agents.scaffolds import SUBMIT_SENTINEL
from swefleet.trainer.sft_oracle import apply_command

from tests.integration.sandbox_backends import require

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "envs/data/quickstart/tasks.jsonl"
PACKAGE_INIT = REPO / "envs/data/quickstart/repo/textkit/__init__.py"
TEXTKIT_5_BUG = "width - len(placeholder) + 1]"  # only textkit-5's wrap.py has this line


def _hanging_patch(seconds: str) -> str:
    """A model patch whose every test run sleeps `seconds` in a child process (at import)."""
    old = PACKAGE_INIT.read_text().splitlines(keepends=True)
    new = [*old, "\n", f'__import__("subprocess").run(["sleep", "{seconds}"])\n']
    diff = difflib.unified_diff(old, new, "a/textkit/__init__.py", "b/textkit/__init__.py")
    return "diff --git a/textkit/__init__.py b/textkit/__init__.py\n" + "".join(diff)


@pytest.fixture(scope="module")
def chat_server(tmp_path_factory):
    """The scripted chat server's URL; each test posts its own script."""
    port_file = tmp_path_factory.mktemp("chat") / "port"
    proc = subprocess.Popen(
        [sys.executable, "-m", "swefleet.inference.scripted_chat_server", "--port-file",
         str(port_file), "--served-model-name", "busy-policy"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not port_file.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "chat server did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port_file.read_text()}"
    proc.terminate()
    proc.wait(timeout=10)


def _processes() -> dict[int, tuple[int, list[str]]]:
    """Every process of this machine: pid -> (parent pid, argv)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        found[int(entry.name)] = (ppid, [a.decode(errors="replace") for a in argv if a])
    return found


def _descendants(pid: int) -> set[int]:
    procs, found, todo = _processes(), set(), [pid]
    while todo:
        parent = todo.pop()
        children = {p for p, (ppid, _) in procs.items() if ppid == parent}
        found |= children
        todo += children
    return found


def _sleeping(seconds: str) -> list[int]:
    return [p for p, (_, argv) in _processes().items() if argv == ["sleep", seconds]]


def _containers(pid: int) -> list[str]:
    """Names of the containers that process `pid` made (its owner label), running or not."""
    out = subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}", "--filter",
                          f"label=swefleet.owner_pid={pid}"],
                         capture_output=True, text=True, check=True).stdout
    return out.split()


def _popen(argv: list[str], tmp_path: Path) -> subprocess.Popen:
    """`argv` with its output in `tmp_path`/stdout and /stderr."""
    # Ctrl-C as in a terminal: a suite started in the background inherits SIGINT ignored, and
    # so would the command; a handler here becomes the default disposition across exec
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(argv, cwd=REPO, stdout=(tmp_path / "stdout").open("wb"),
                                stderr=(tmp_path / "stderr").open("wb"),
                                stdin=subprocess.DEVNULL)
    finally:
        signal.signal(signal.SIGINT, previous)


def _wait_until(busy, proc: subprocess.Popen, tmp_path: Path) -> None:
    deadline = time.monotonic() + 180
    while not busy():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            pytest.fail(f"the command never got busy (rc {proc.poll()}):\n"
                        + (tmp_path / "stderr").read_text()[-3000:])
        time.sleep(0.2)


def _leftovers(pid: int, descendants: set[int], marks: tuple[str, ...] = ()) -> list[str]:
    """What process `pid` started that still runs: the processes under it (taken before the
    signal), the `sleep`s of `marks`, its bwrap boxes, its containers."""
    procs = _processes()
    left = [f"process {p}: {' '.join(procs[p][1])}" for p in descendants if p in procs]
    left += [f"sleep {m}: {p}" for m in marks for p in _sleeping(m)]
    box_dir = f"/{pid}."  # a box's directory: <state dir>/<owner pid>.<name>
    left += [f"bwrap {p}" for p, (_, argv) in procs.items()
             if argv and argv[0].endswith("bwrap") and box_dir in " ".join(argv)]
    return left + [f"container {name}" for name in _containers(pid)]


def _interrupt(proc: subprocess.Popen, sig: int, tmp_path: Path, marks: tuple[str, ...] = ()
               ) -> tuple[int, list[str], list[str]]:
    """Send `sig`: (exit code, what was still running 5 s later, output lines since `sig`)."""
    descendants = _descendants(proc.pid)
    before = [len((tmp_path / name).read_bytes()) for name in ("stdout", "stderr")]
    sent = time.monotonic()
    proc.send_signal(sig)
    left = _leftovers(proc.pid, descendants, marks)
    while left and time.monotonic() < sent + 5:
        time.sleep(0.2)
        left = _leftovers(proc.pid, descendants, marks)
    try:
        rc = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    after = "".join((tmp_path / name).read_text()[n:] for name, n in zip(("stdout", "stderr"),
                                                                         before, strict=True))
    assert "Traceback" not in after, after
    return rc, left, [line for line in after.splitlines() if line.strip()]


def _one_line(lines: list[str], command: str, name: str) -> None:
    """The last line says the command was interrupted by signal `name`; no other line says so,
    and none is a warning or an error."""
    assert re.fullmatch(rf"swefleet {command}: interrupted \({name}\)(; stopped .*)?",
                        lines[-1]), lines
    assert sum("interrupted" in x for x in lines) == 1, lines
    assert not [x for x in lines if re.search(r" (WARNING|ERROR) ", x)], lines


@pytest.mark.parametrize("backend", ["docker", "bwrap"])
@pytest.mark.parametrize("sig,code,name", [(signal.SIGINT, 130, "SIGINT"),
                                           (signal.SIGTERM, 143, "SIGTERM")])
def test_a_signal_ends_eval_with_one_line_and_nothing_left(tmp_path, chat_server, backend, sig,
                                                            code, name):
    require(backend)
    mark = uuid.uuid4().int % 10**6
    agent_s, grade_s = f"611.{mark}", f"613.{mark}"  # no other process sleeps these
    busy = (f"if grep -qF '{TEXTKIT_5_BUG}' textkit/wrap.py; then sleep {agent_s}; else\n"
            f"{{ {apply_command(_hanging_patch(grade_s))}\n}} && echo {SUBMIT_SENTINEL}; fi")
    httpx.post(f"{chat_server}/script", json=[{"content": f"```bash\n{busy}\n```"}],
               trust_env=False).raise_for_status()
    cfg = tmp_path / "eval.toml"
    cfg.write_text(f'[agent]\nscaffold = "bash"\nmax_steps = 6\ncommand_timeout_s = 900\n'
                   f'[envs]\nbackend = "{backend}"\n')
    proc = _popen([sys.executable, "-m", "swefleet", "eval", "--api", "chat", "--server",
                   chat_server, "--tasks", str(TASKS), "--split", "heldout", "--max-workers", "3",
                   "--config", str(cfg), "--output-dir", str(tmp_path / "out")], tmp_path)
    _wait_until(lambda: _sleeping(agent_s) and _sleeping(grade_s), proc, tmp_path)
    if backend == "docker":
        assert _containers(proc.pid), "no container carries the eval's owner label"
    rc, left, lines = _interrupt(proc, sig, tmp_path, (agent_s, grade_s))
    assert rc == code, lines
    assert not left, f"5 s after {name}: {left}"
    _one_line(lines, "eval", name)
    episodes = tmp_path / "out/episodes.jsonl"
    recorded = [json.loads(x) for x in episodes.read_text().splitlines()] if episodes.exists() else []
    assert not [r for r in recorded if r["status"] in ("resolved", "unresolved")], recorded


def test_sigterm_ends_rl_with_one_line_and_nothing_left(tmp_path):
    """`swefleet rl` on the quickstart (an inference server and a trainer of its own, sandboxes
    in Docker): SIGTERM once its episodes run."""
    proc = _popen([sys.executable, "-m", "swefleet", "rl", "--config",
                   str(REPO / "configs/quickstart.toml"), "--output-dir", str(tmp_path / "run"),
                   "--set", "orchestrator.steps=50"], tmp_path)
    _wait_until(lambda: _containers(proc.pid), proc, tmp_path)
    rc, left, lines = _interrupt(proc, signal.SIGTERM, tmp_path)
    assert rc == 143, lines
    assert not left, f"5 s after SIGTERM: {left}"
    _one_line(lines, "rl", "SIGTERM")


@pytest.mark.parametrize("backend", ["docker", "bwrap"])
def test_sigterm_ends_a_parity_run_with_one_line_and_nothing_left(tmp_path, backend):
    """`benchmarks/backend_parity.py` grading gold patches on one backend: SIGTERM once its
    sandboxes run; the record it was given stays untouched."""
    require(backend)
    record = tmp_path / "record.jsonl"
    record.write_text("")
    proc = _popen([sys.executable, str(REPO / "benchmarks/backend_parity.py"), "--tasks",
                   str(TASKS), "--slice", "0:1", "--hacks", "none", "--gold-repeats", "40",
                   "--backend", backend, "--record", str(record)], tmp_path)

    def boxes() -> bool:
        if backend == "docker":
            return bool(_containers(proc.pid))
        return any(argv and argv[0].endswith("bwrap") and f"/{proc.pid}." in " ".join(argv)
                   for _, argv in _processes().values())

    _wait_until(boxes, proc, tmp_path)
    rc, left, lines = _interrupt(proc, signal.SIGTERM, tmp_path)
    assert rc == 143, lines
    assert not left, f"5 s after SIGTERM: {left}"
    _one_line(lines, "backend_parity", "SIGTERM")
    assert record.read_text() == ""
