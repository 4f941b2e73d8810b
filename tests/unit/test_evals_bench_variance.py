"""Where run-to-run variance comes from: per-run phase medians, tasks drawn and the machine's
state, the phase that moved named, on the fixture runs (numbers by hand in the comments)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from swefleet.evals.bench_data import find_run_dirs, load_run
from swefleet.evals.bench_markdown import bench_markdown
from swefleet.evals.bench_report import build_bench_report

from swefleet.app.bench import run_bench
from swefleet.app.bench_conditions import GpuSampler, conditions, parse_gpu_line, summarize
from tests.unit.evals_bench_fixture import write_bench
from tests.unit.test_evals_bench_run import FakeRL

pytestmark = pytest.mark.unit
GPU = {"sm_clock_mhz": 1980.0, "mem_clock_mhz": 3201.0, "temperature_c": 41.0,
       "power_w": 123.5, "utilization_pct": None}


def _report(tmp_path) -> dict:
    env = {"run_conditions": {"run-0": {"before": {"loadavg": [0.5, 0.4, 0.3], "gpus": [GPU]},
                                        "after": {"loadavg": [1.5, 0.9, 0.5], "gpus": []}}}}
    runs = [load_run(p) for p in find_run_dirs(write_bench(tmp_path))]
    return build_bench_report(runs, env)


def test_the_phase_that_moved_is_named(tmp_path):
    v = _report(tmp_path)["run_to_run"]
    # steady steps 2..5: medians run-0 2.0, run-1 2.5, run-2 3.0 -> spread 1.0;
    # wait_for_data = time - 1 -> 1.0, 1.5, 2.0 (spread 1.0); train, export, sync constant
    assert [r["step_time_median_s"] for r in v["runs"]] == [2.0, 2.5, 3.0]
    assert [r["phase_medians_s"]["wait_for_data_s"] for r in v["runs"]] == [1.0, 1.5, 2.0]
    assert v["step_median_spread_s"] == 1.0 and v["moved_phase"] == "wait_for_data_s"
    assert v["share_of_step_spread"] == 1.0 and v["phase_spreads_s"]["train_s"] == 0.0
    assert v["tasks_jaccard_min"] == pytest.approx(1 / 3)  # run-0 {a, b}, run-1 {a, c}
    assert [r["tasks_drawn"] for r in v["runs"]] == [2, 2, 0]
    assert v["runs"][0]["conditions"]["before"]["gpus"] == [GPU]
    assert v["runs"][1]["conditions"] is None


def test_bench_md_shows_runs_side_by_side(tmp_path):
    text = bench_markdown(_report(tmp_path))
    assert "## Run to run" in text and "the phase that moved most is **wait_for_data_s**" in text
    assert "| run-0 | 2.000s |" in text and "1980.0 MHz / 41.0 C / 123.5 W (before)" in text


def test_bench_md_prefers_the_gpu_state_sampled_during_the_run(tmp_path):
    report = _report(tmp_path)
    samples = [[GPU], [GPU | {"sm_clock_mhz": 1500.0, "temperature_c": 60.0}], [GPU]]
    report["run_to_run"]["runs"][0]["conditions"]["during"] = {"gpus": summarize(samples)}
    assert "1980.0 MHz (min 1500.0) / max 60.0 C / 123.5 W" in bench_markdown(report)


def test_the_sampler_summarises_each_gpu_over_its_samples():
    reads = iter([[GPU, GPU], [GPU | {"sm_clock_mhz": 1000.0, "power_w": None}]])
    sampler = GpuSampler(interval_s=0.01, read=lambda: next(reads, [])).start()
    time.sleep(0.2)
    first, second = sampler.stop()
    assert first == {"samples": 2, "sm_clock_mhz_median": 1490.0, "sm_clock_mhz_min": 1000.0,
                     "temperature_c_max": 41.0, "power_w_median": 123.5,
                     "utilization_pct_median": None}
    assert second["samples"] == 1 and summarize([]) == []


def test_gpu_lines_and_conditions_are_read():
    assert parse_gpu_line("1980, 3201, 41, 123.50, [N/A]") == GPU
    now = conditions()
    assert len(now["loadavg"]) == 3 and now["cpus"] >= 1 and isinstance(now["gpus"], list)


def test_each_run_records_the_machine_before_during_and_after(tmp_path):
    run_bench(Path("c.toml"), 6, 2, tmp_path, [], run_one=FakeRL())
    env = json.loads((tmp_path / "bench_env.json").read_text())
    assert sorted(env["run_conditions"]) == ["run-0", "run-1"]
    assert set(env["run_conditions"]["run-1"]) == {"before", "during", "after"}
    run_bench(Path("c.toml"), 6, 2, tmp_path, [], run_one=FakeRL())  # resumed: nothing ran
    again = json.loads((tmp_path / "bench_env.json").read_text())
    assert again["run_conditions"] == env["run_conditions"]  # kept, not lost
