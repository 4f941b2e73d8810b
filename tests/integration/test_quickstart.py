"""The walking skeleton end to end: `swefleet rl` on the quickstart config, shortened."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from swefleet.types import EpisodeStatus

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def _swefleet_containers(owner_pid: int) -> list[str]:
    """Containers created by the `swefleet` process `owner_pid` (sandboxes and graders)."""
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=swefleet.owner_pid={owner_pid}"],
        capture_output=True, text=True, check=True,
    ).stdout
    return out.split()


def _rl_cmd(out: Path, *overrides: str) -> list[str]:
    cmd = [sys.executable, "-m", "swefleet", "rl", "--config",
           str(REPO / "configs/quickstart.toml"), "--output-dir", str(out)]
    for o in overrides:
        cmd += ["--set", o]
    return cmd


def test_quickstart_runs_end_to_end(tmp_path):
    out = tmp_path / "run"
    small = ("orchestrator.steps=2", "orchestrator.groups_per_step=2",  # the demo's RL is
             "orchestrator.rollouts_per_task=2")  # longer (`make run`); 2 x 2 x 2 here
    # the random-init model never submits: grade its patches anyway, to test the grading path
    proc = subprocess.Popen(_rl_cmd(out, "agent.max_steps=2", "agent.grade_unsubmitted=true",
                                    *small), cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 0, stdout[-3000:] + stderr[-5000:]

    summary = json.loads((out / "summary.json").read_text())
    assert summary["policy_versions_served"] >= 2
    assert summary["steps"] == 2

    episodes = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert len(episodes) >= 2 * 2 * 2  # steps * groups * rollouts
    valid = {s.value for s in EpisodeStatus}
    for ep in episodes:
        assert ep["status"] in valid
        if ep["status"] not in ("cancelled", "dropped_stale"):
            assert ep["turns"], ep
            turn = ep["turns"][0]
            assert len(turn["completion_ids"]) == len(turn["logprobs"]) > 0
    graded = [ep for ep in episodes if ep.get("grade")]
    assert graded, "no episode was graded"
    assert all(ep["grade"]["tests"] for ep in graded), "grading ran no tests"

    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [0, 1]
    trainer = [json.loads(line) for line in (out / "trainer_metrics.jsonl").read_text().splitlines()]
    assert len(trainer) == 2
    assert sorted(p.name for p in (out / "weights").iterdir() if p.is_dir()) == ["v000001", "v000002"]
    assert (out / "config.json").exists()
    train = [json.loads(line) for line in (REPO / "envs/data/quickstart/tasks.jsonl").read_text()
             .splitlines() if json.loads(line)["split"] == "train"]
    trained = json.loads((out / "trained_tasks.json").read_text())["task_ids"]
    assert trained == sorted(t["instance_id"] for t in train)  # what an eval checks overlap with
    assert _swefleet_containers(proc.pid) == []


def test_ctrl_c_leaves_no_container(tmp_path):
    out = tmp_path / "run"
    proc = subprocess.Popen(_rl_cmd(out, "orchestrator.steps=50"), cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not _swefleet_containers(proc.pid):
            assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "no sandbox was started"
            time.sleep(0.5)
        os.kill(proc.pid, signal.SIGINT)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert _swefleet_containers(proc.pid) == []
    assert (out / "episodes.jsonl").exists() or (out / "config.json").exists()
