"""`swefleet tasks probes` saves each task's probes as that task ends: a run killed after its
first task keeps that task's record and leaves the others as they were."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
QUICKSTART = Path(__file__).resolve().parents[2] / "envs" / "data" / "quickstart"
IDS = ("textkit__textkit-2", "textkit__textkit-4")


def _records(path: Path) -> dict[str, dict]:
    return {r["instance_id"]: r for r in map(json.loads, path.read_text().splitlines())}


def test_a_killed_probes_run_keeps_the_tasks_it_finished(tmp_path):
    data = shutil.copytree(QUICKSTART, tmp_path / "quickstart")
    tasks = data / "tasks.jsonl"
    records = _records(tasks)
    for instance_id in IDS:
        records[instance_id].pop("probes")
    tasks.write_text("".join(json.dumps(r) + "\n" for r in records.values()))

    proc = subprocess.Popen(
        [sys.executable, "-m", "swefleet", "tasks", "probes", "--tasks", str(tasks),
         "--instance-ids", *IDS, "--max-workers", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        first = next(line for line in proc.stdout if "textkit__textkit-" in line)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)

    done = next(i for i in IDS if i in first)
    after = _records(tasks)
    assert after[done].get("probes"), first  # saved before its line was printed
    assert all("probes" not in after[i] for i in IDS if i != done)  # killed before it ended
    assert {i: r for i, r in after.items() if i != done} == \
        {i: r for i, r in records.items() if i != done}
