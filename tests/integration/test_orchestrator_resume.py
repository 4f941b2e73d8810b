"""kill -9 of the orchestrator mid-run, then a restart on the same output dir: it continues from
the last completed step — no step repeated or skipped, no finished trajectory lost — and no
child process (server, trainer) outlives the killed orchestrator."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from swefleet.batch import read_batch

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
STEPS = 6


def _cmd(out: Path) -> list[str]:
    return [sys.executable, "-m", "swefleet", "rl", "--config",
            str(REPO / "configs/learning_sanity.toml"), "--output-dir", str(out),
            "--set", f"orchestrator.steps={STEPS}", "--set", "orchestrator.groups_per_step=2",
            "--set", "orchestrator.keep_weights=0"]  # every published version stays: checked below


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def test_kill_9_then_resume(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(_cmd(out), cwd=REPO, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 400
    while not (out / "batches" / "step_000002.npz").exists():
        assert proc.poll() is None, "run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.1)
    kids = [int(p) for p in subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True,
                                           text=True, check=False).stdout.split()]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    deadline = time.monotonic() + 60
    while any(_alive(k) for k in kids):
        assert time.monotonic() < deadline, "server/trainer outlived the killed orchestrator"
        time.sleep(0.2)

    done = subprocess.run(_cmd(out), cwd=REPO, capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-4000:]

    batches = sorted((out / "batches").glob("step_*.npz"))
    assert [b.name for b in batches] == [f"step_{i:06d}.npz" for i in range(STEPS)]
    weights = sorted(p.name for p in (out / "weights").iterdir() if ".tmp-" not in p.name)
    assert weights == [f"v{i:06d}" for i in range(1, STEPS + 1)]
    used: list[str] = []
    for b in batches:
        arrays, meta = read_batch(b)
        assert np.all(arrays["policy_version"] >= meta["step"] - 2)  # staleness bound held
        used += meta["episode_ids"]
    assert len(used) == len(set(used)), "an episode was trained on twice"
    scored_before = {e["episode_id"] for e in before if e["reward"] is not None}
    lost = scored_before - set(used)
    assert not lost, f"finished trajectories never trained on: {sorted(lost)[:5]}"


def test_kill_9_of_the_trainer_fails_loudly_then_resumes(tmp_path):
    out = tmp_path / "run"
    log = tmp_path / "first.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(_cmd(out), cwd=REPO, stdout=f, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 400
    while not (out / "weights" / "v000002").exists():
        assert proc.poll() is None, "run ended before the trainer could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.1)
    ps = subprocess.run(["pgrep", "-f", f"trainer.main --config {out}"], capture_output=True,
                        text=True, check=False).stdout.split()
    assert len(ps) == 1, ps
    os.kill(int(ps[0]), signal.SIGKILL)
    try:
        proc.wait(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, log.read_text()[-3000:]
    assert "trainer process exited with code -9" in log.read_text()

    done = subprocess.run(_cmd(out), cwd=REPO, capture_output=True, text=True, timeout=600,
                          check=False)
    assert done.returncode == 0, done.stderr[-4000:]
    weights = sorted(p.name for p in (out / "weights").iterdir() if ".tmp-" not in p.name)
    assert weights == [f"v{i:06d}" for i in range(1, STEPS + 1)]
    used = []
    for b in sorted((out / "batches").glob("step_*.npz")):
        used += read_batch(b)[1]["episode_ids"]
    assert len(used) == len(set(used))
