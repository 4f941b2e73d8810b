"""A run folder holds one run: through the real command line, a different eval or RL run on the
same `--output-dir` is one line and exit 2 with nothing touched, the same run resumes (with
other infrastructure settings too), and `--restart` moves the old run aside and starts over."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "envs/data/quickstart/tasks.jsonl"
ONE_TASK = ("--split", "heldout", "--instance-ids", "textkit__textkit-5")


def _swefleet(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "swefleet", *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, check=False)


def _eval(out: Path, agent: str, *extra: str) -> subprocess.CompletedProcess:
    return _swefleet("eval", "--agent", agent, "--tasks", str(TASKS), *ONE_TASK,
                     "--output-dir", str(out), *extra)


def _files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.is_file()}


def test_another_agent_is_refused_the_same_resumes_restart_starts_over(tmp_path):
    out = tmp_path / "oracle"
    first = _eval(out, "oracle")
    assert first.returncode == 0, first.stderr[-3000:]
    assert json.loads((out / "report.json").read_text())["success_rate"] == 1.0
    assert "eval resolved=1" in first.stdout  # the progress line of the episodes run
    before = _files(out)

    other = _eval(out, "empty")
    assert other.returncode == 2
    assert other.stderr == (f"swefleet eval: error: {out} holds a run of agent 'oracle'; this "
                            "one is 'empty' (--restart to start over)\n")
    assert _files(out) == before  # nothing written, nothing lost
    slower = _eval(out, "oracle", "--timeout", "60")  # grading deadline: changes results
    assert slower.returncode == 2 and slower.stderr.count("\n") == 1, slower.stderr
    assert "holds a run of envs.grading.timeout_s 300.0; this one is 60.0 (" in slower.stderr

    same = _eval(out, "oracle", "--max-workers", "3")  # more workers: still the same run
    assert same.returncode == 0, same.stderr[-3000:]
    assert "0 episodes to run (1 already done)" in same.stderr
    assert "eval resolved=" not in same.stdout + same.stderr  # nothing ran: no empty progress
    assert (out / "episodes.jsonl").read_bytes() == before["episodes.jsonl"]

    restarted = _eval(out, "empty", "--restart")
    assert restarted.returncode == 0, restarted.stderr[-3000:]
    assert json.loads((out / "report.json").read_text())["success_rate"] == 0.0
    [aside] = tmp_path.glob("oracle.replaced-*")
    assert (aside / "episodes.jsonl").read_bytes() == before["episodes.jsonl"]
    assert json.loads((aside / "report.json").read_text())["success_rate"] == 1.0
    assert f"moved to {aside}" in restarted.stderr



def _rl(out: Path, *sets: str) -> list[str]:
    argv = [sys.executable, "-m", "swefleet", "rl", "--config",
            str(REPO / "configs/learning_sanity.toml"), "--output-dir", str(out)]
    return argv + [word for s in sets for word in ("--set", s)]


def _run_until(argv: list[str], log: Path, done, timeout: float = 180) -> None:
    """Start `argv` (its stderr to `log`), kill it (and its children) once `done()` holds."""
    with open(log, "w") as err:
        proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while not done():
            assert proc.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_rl_resumes_the_same_run_only(tmp_path):
    """RL's first result (the model it creates) binds the folder: another learning rate is
    refused, more steps and workers resume, `--restart` moves the run aside. Each start is
    killed as soon as it has shown what it does with the folder."""
    out, log = tmp_path / "rl", tmp_path / "rl.log"
    _run_until(_rl(out), log, lambda: (out / "model/swefleet_model.json").exists())
    before = _files(out)

    other = subprocess.run(_rl(out, "trainer.lr=0.5"), cwd=REPO, capture_output=True,
                           text=True, timeout=120, check=False)
    assert other.returncode == 2
    assert other.stderr == (f"swefleet rl: error: {out} holds a run of trainer.lr 0.005; this "
                            "one is 0.5 (--restart to start over)\n")
    assert _files(out) == before

    more = _rl(out, "orchestrator.steps=60", "orchestrator.max_concurrent_episodes=8")
    _run_until(more, log, lambda: "holds a run: resuming it" in log.read_text())

    _run_until(_rl(out, "trainer.lr=0.5") + ["--restart"], log,  # the new run binds the folder
               lambda: "moved to" in log.read_text() and (out / "fingerprint.json").exists())
    [aside] = tmp_path.glob("rl.replaced-*")
    assert (aside / "fingerprint.json").read_bytes() == before["fingerprint.json"]
    assert (aside / "model/model.safetensors").read_bytes() == before["model/model.safetensors"]
    recorded = json.loads((aside / "fingerprint.json").read_text())["fingerprint"]
    assert recorded["trainer.lr"] == 0.005
    assert json.loads((out / "fingerprint.json").read_text())["fingerprint"]["trainer.lr"] == 0.5


def test_an_eval_refused_before_any_episode_leaves_no_folder(tmp_path):
    out = tmp_path / "refused"
    proc = _swefleet("eval", "--agent", "oracle", "--tasks", str(TASKS), "--instance-ids",
                     "no__such-1", "--output-dir", str(out))
    assert proc.returncode == 2 and "not in the task set" in proc.stderr
    assert not out.exists()


def test_an_eval_whose_engine_is_unreachable_leaves_no_folder(tmp_path):
    out = tmp_path / "no-engine"
    env = {**os.environ, "DOCKER_HOST": f"unix://{tmp_path}/no-such.sock"}
    proc = subprocess.run([sys.executable, "-m", "swefleet", "eval", "--agent", "oracle",
                           "--tasks", str(TASKS), *ONE_TASK, "--output-dir", str(out)],
                          cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
                          env=env)  # fmt: skip
    assert proc.returncode != 0 and not out.exists(), proc.stderr[-2000:]
