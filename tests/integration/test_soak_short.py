"""The short soak (`benchmarks/soak.py --short`): >= 60 episodes through the real RL loop with
every fault kind injected at least once; nothing lost, leaked, repeated or skipped."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def test_short_soak(tmp_path):
    work = tmp_path / "soak"
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks/soak.py"), "--short",
                           "--work-dir", str(work)], cwd=REPO, capture_output=True, text=True,
                          timeout=1200, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["episodes"] >= 60, result
    assert result["fault_kinds_missing"] == [], result
    for key in ("lost", "steps_repeated", "steps_skipped", "containers_left", "processes_left",
                "inconsistent_trajectories", "trained_on_twice"):
        assert result[key] == 0, (key, result)
    not_recovered = {kind: f["not_recovered"] for kind, f in result["faults"].items()
                     if f.get("not_recovered")}
    assert not not_recovered, not_recovered
