"""`swefleet plan --config --run DIR`: a SWE step's sandbox, command and grading time, from the
run's measured phases; without a run the plan says the step is the model's time only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swefleet.app.cli import main

pytestmark = pytest.mark.unit
CONFIG = str(Path(__file__).resolve().parents[2] / "configs" / "gpu_demo.toml")


def _run(tmp_path, steps: list[tuple[float, float, float]]) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("".join(json.dumps({
        "step": i, "rollout/phase_sandbox_mean_s": s, "rollout/phase_env_mean_s": e,
        "rollout/phase_grading_mean_s": g}) + "\n" for i, (s, e, g) in enumerate(steps)))
    return run


def _plan(capsys, *argv) -> tuple[int, dict, str]:
    code = main(["plan", *argv])
    out = capsys.readouterr().out
    return code, json.loads(out.strip().splitlines()[-1]), out


def test_measured_phases_are_added_once_per_wave(tmp_path, capsys):
    run = _run(tmp_path, [(30.0, 90.0, 60.0), (1.0, 6.0, 3.0), (2.0, 8.0, 3.0), (1.0, 7.0, 5.0)])
    code, plan, out = _plan(capsys, "--config", CONFIG, "--run", str(run))
    env, step = plan["environment"], plan["step"]
    assert code == 0 and env["steps_measured"] == 3  # the first (warm-up) step left out
    assert (env["sandbox_s"], env["commands_s"], env["grading_s"]) == (1.0, 7.0, 3.0)
    assert env["waves_per_step"] == 1  # gpu_demo: 64 a step, 64 or more in flight
    assert env["rollout_s_with_environment"] == pytest.approx(step["rollout_s"] + 11.0)
    assert env["step_s"] == pytest.approx(max(step["rollout_s"] + 11.0, step["train_s"])
                                          + step["weight_sync_s"])
    assert "measured in" in out


def test_without_a_run_the_plan_says_what_it_leaves_out(capsys):
    code, plan, out = _plan(capsys, "--config", CONFIG)
    assert code == 0 and "environment" not in plan
    assert "step_s is the model's time only" in out


def test_bad_runs_are_one_line_errors(tmp_path, capsys):
    assert main(["plan", "--config", CONFIG, "--run", str(tmp_path)]) == 2
    assert "no metrics.jsonl" in capsys.readouterr().err
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 0, "loss": 1.0}) + "\n")
    assert main(["plan", "--config", CONFIG, "--run", str(tmp_path)]) == 2
    assert "not a SWE run" in capsys.readouterr().err
    layout = str(Path(CONFIG).parent / "layouts" / "glm5_28x8.toml")
    assert main(["plan", "--layout", layout, "--run", str(tmp_path)]) == 2
    assert "not to a --layout" in capsys.readouterr().err
