import json

import pytest
from swefleet.orchestrator.trainer_proc import TrainerMetricsTail

from swefleet.rundir import RunDir

pytestmark = pytest.mark.unit


def _append(run_dir: RunDir, **record) -> None:
    with open(run_dir.trainer_metrics, "a") as f:
        f.write(json.dumps(record) + "\n")


def test_idle_fraction_covers_the_trainer_steps_since_the_previous_call(tmp_path):
    run_dir = RunDir(tmp_path)
    run_dir.root.mkdir(parents=True, exist_ok=True)
    tail = TrainerMetricsTail(run_dir)
    assert tail() == {}
    _append(run_dir, step=0, loss=0.5, wait_time_s=3.0, step_time_s=1.0, export_time_s=0.0,
            moe_load=[[1, 2]], note="x")
    _append(run_dir, step=1, loss=0.4, wait_time_s=1.0, step_time_s=2.5, export_time_s=0.5)
    first = tail()
    assert first["trainer/idle_fraction"] == pytest.approx(4.0 / 8.0)
    assert first["trainer/loss"] == 0.4 and first["trainer/steps_since_last"] == 2
    assert "trainer/note" not in first and "trainer/moe_load" not in first  # last record only
    again = tail()  # no new trainer step: the last window's value, zero new steps
    assert again["trainer/idle_fraction"] == pytest.approx(0.5)
    assert again["trainer/steps_since_last"] == 0
    _append(run_dir, step=2, loss=0.3, wait_time_s=0.0, step_time_s=2.0, export_time_s=0.0)
    assert tail()["trainer/idle_fraction"] == 0.0
