"""The bench runner: commands, resume, failures, and the PNG plots (no real RL run)."""

import argparse
import sys
from pathlib import Path

import pytest
from swefleet.evals.bench_outputs import write_bench_outputs
from swefleet.evals.plots import write_bench_plots
from swefleet.evals.plots_eval import write_eval_plots

from swefleet.app import bench
from swefleet.app.bench import BenchRunFailed, rl_command, run_bench, run_subprocess
from tests.unit.evals_bench_fixture import STEP_TIMES, write_bench, write_run

pytestmark = pytest.mark.unit
PNG = b"\x89PNG\r\n\x1a\n"


def test_rl_command_passes_overrides_and_steps_last():
    cmd = rl_command(Path("c.toml"), Path("out/run-0"), 5, ["agent.max_steps=2"])
    assert cmd[:4] == [sys.executable, "-m", "swefleet", "rl"]
    assert cmd[4:] == ["--config", "c.toml", "--output-dir", "out/run-0",
                       "--set", "agent.max_steps=2", "--set", "orchestrator.steps=5"]


class FakeRL:
    """Stands in for `swefleet rl`: writes a run directory like the fixture's run-0."""

    def __init__(self, fail_on: int | None = None) -> None:
        self.calls: list[list[str]] = []
        self.fail_on = fail_on

    def __call__(self, cmd: list[str], log_path: Path) -> int:
        self.calls.append(cmd)
        log_path.write_text("fake rl log\n")
        if len(self.calls) - 1 == self.fail_on:
            return 3
        out = Path(cmd[cmd.index("--output-dir") + 1])
        steps = int(cmd[-1].split("=")[1])
        write_run(out, STEP_TIMES["run-0"][:steps], steps=steps)
        return 0


def test_run_bench_runs_each_run_once_and_resumes(tmp_path):
    fake = FakeRL()
    run_bench(Path("c.toml"), 6, 2, tmp_path, ["agent.max_steps=2"], run_one=fake)
    assert [c[c.index("--output-dir") + 1] for c in fake.calls] == [
        str(tmp_path / "run-0"), str(tmp_path / "run-1")]
    assert (tmp_path / "bench_env.json").exists()
    # second invocation: both complete, nothing is run again
    run_bench(Path("c.toml"), 6, 2, tmp_path, [], run_one=fake)
    assert len(fake.calls) == 2


def test_incomplete_run_is_moved_aside_and_rerun(tmp_path):
    write_run(tmp_path / "run-0", [5, 2], steps=6)  # served 2 of 6 versions
    (tmp_path / "run-1" / "logs").mkdir(parents=True)  # crashed before writing config.json
    fake = FakeRL()
    run_bench(Path("c.toml"), 6, 2, tmp_path, [], run_one=fake)
    assert len(fake.calls) == 2
    assert len(list(tmp_path.glob("run-0.incomplete-*"))) == 1
    assert len(list(tmp_path.glob("run-1.incomplete-*"))) == 1
    assert write_bench_outputs(tmp_path, plots=False)["n_runs"] == 2


def test_failed_run_raises_with_log(tmp_path):
    with pytest.raises(BenchRunFailed, match="run 1 exited with code 3"):
        run_bench(Path("c.toml"), 6, 3, tmp_path, [], run_one=FakeRL(fail_on=1))
    with pytest.raises(ValueError, match="steps >= 2"):
        run_bench(Path("c.toml"), 1, 3, tmp_path, [])


def test_run_subprocess_logs_output_and_exit_code(tmp_path):
    log = tmp_path / "x.log"
    assert run_subprocess([sys.executable, "-c", "print('hello'); raise SystemExit(4)"], log) == 4
    assert "hello" in log.read_text()


def test_bench_cli_handler_writes_report(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bench, "run_subprocess", FakeRL())
    args = argparse.Namespace(config="c.toml", steps=6, runs=2, output_dir=str(tmp_path),
                              set=[], no_plots=True)
    assert bench.run_bench_cli(args) == 0
    assert "# swefleet bench" in capsys.readouterr().out
    assert (tmp_path / "bench.json").exists() and (tmp_path / "bench.md").exists()
    monkeypatch.setattr(bench, "run_subprocess", FakeRL(fail_on=0))
    args.output_dir = str(tmp_path / "failing")
    assert bench.run_bench_cli(args) == 1


def test_plots_are_png_files(tmp_path):
    report = write_bench_outputs(write_bench(tmp_path / "b"), plots=False)
    names = write_bench_plots(report, tmp_path)
    assert names == ["step_time.png", "step_time_hist.png", "phases.png", "success_by_task.png"]
    for name in names:
        assert (tmp_path / name).read_bytes()[:8] == PNG
    eval_report = {"per_task": {"a": [True, False], "b": []}}
    assert write_eval_plots(eval_report, tmp_path / "b") == ["success_by_task.png"]
    assert write_eval_plots({"per_task": {}}, tmp_path) == []

