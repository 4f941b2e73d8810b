"""bench.json numbers against a hand computation on the fixture run directories."""

import json

import pytest
from swefleet.evals.bench_data import find_run_dirs, load_run, step_rows
from swefleet.evals.bench_outputs import write_bench_outputs
from swefleet.evals.bench_report import SCHEMA, build_bench_report, config_diff
from swefleet.evals.steptime import summarize

from tests.unit.evals_bench_fixture import write_bench, write_run

pytestmark = pytest.mark.unit

# Common warm-up = max(2, 1, 1) = 2 -> steady steps 2..5 of run-0..2 (run-3 is incomplete):
#   run-0: 2 2.25 1.75 2   run-1: 2.5 3 2.5 2.5   run-2: 3 3 3.5 2.5
# pooled sorted: 1.75 2 2 2.25 2.5 2.5 2.5 2.5 3 3 3 3.5  (n = 12, sum 30.5, sum of squares 80.375)
STEADY_MEAN = 30.5 / 12
STEADY_STD = ((80.375 - 30.5**2 / 12) / 11) ** 0.5


@pytest.fixture
def report(tmp_path):
    return build_bench_report([load_run(p) for p in find_run_dirs(write_bench(tmp_path))])


def test_step_rows_join_sources_by_step(tmp_path):
    run = load_run(write_run(tmp_path / "r", [10, 4, 2], steps=3, skip_trainer_steps=(1,)))
    assert [r["time_s"] for r in run.rows] == [10, 4, 2]
    assert [r["served_at_s"] for r in run.rows] == [10, 14, 16]
    assert run.rows[0]["wait_for_data_s"] == 9 and run.rows[0]["weight_sync_s"] == 0.25
    assert run.rows[1]["train_s"] is None and run.rows[2]["train_s"] == 0.5
    assert run.rows[2]["tokens_per_s"] == 300 and run.complete


def test_step_rows_stop_at_missing_version_and_reject_clock_reset():
    weights = [{"version": 1, "served_at_s": 3.0, "sync_s": 0}, {"version": 3, "served_at_s": 9.0}]
    assert len(step_rows(weights, [], [])) == 1
    with pytest.raises(ValueError, match="does not increase"):
        step_rows([{"version": 1, "served_at_s": 3.0}, {"version": 2, "served_at_s": 1.0}], [], [])


def test_headline_numbers_match_hand_computation(report):
    assert report["schema"] == SCHEMA
    assert report["n_runs"] == 3 and report["steps_per_run"] == 6
    assert report["warmup_steps"] == 2
    assert [r["warmup_steps_detected"] for r in report["runs"]] == [2, 1, 1]
    assert report["steady_state_steps"] == 12
    assert report["step_time_median_s"] == pytest.approx(2.5)  # (s[5] + s[6]) / 2
    assert report["step_time_p90_s"] == pytest.approx(3.0)  # pos 9.9 between s[9]=3 and s[10]=3
    assert report["step_time_mean_s"] == pytest.approx(STEADY_MEAN)
    assert report["step_time_std_s"] == pytest.approx(STEADY_STD)
    assert report["step_time_cv"] == pytest.approx(STEADY_STD / STEADY_MEAN)
    assert report["step_time_min_s"] == 1.75 and report["step_time_max_s"] == 3.5
    assert report["batch_size"] == {"rollouts_per_step": 4, "groups_per_step": 2,
                                    "rollouts_per_task": 2}


def test_best_vs_median_run(report):
    # steady medians: run-0 (1.75 2 2 2.25) 2.0, run-1 2.5, run-2 (2.5 3 3 3.5) 3.0
    assert [r["steady"]["median_s"] for r in report["runs"]] == [2.0, 2.5, 3.0]
    assert report["best_run"] == {"name": "run-0", "step_time_median_s": 2.0}
    assert report["median_run"] == {"name": "run-1", "step_time_median_s": 2.5}
    assert report["best_vs_median"] == pytest.approx(2.0 / 2.5 - 1)
    assert report["run_to_run_cv"] == pytest.approx(0.5 / 2.5)  # std of 2, 2.5, 3 is 0.5
    assert report["runs"][0]["wall_s"] == 22.0


def test_phases_throughput_and_rollouts(report):
    p = report["phases"]
    assert p["wait_for_data_s"]["median_s"] == pytest.approx(1.5)  # time - 1
    assert p["wait_for_data_s"]["fraction_of_step_median"] == pytest.approx(1.5 / 2.5)
    assert p["train_s"]["n"] == 11  # run-2 has no trainer record for step 5
    assert p["train_s"]["median_s"] == 0.5 and p["export_s"]["median_s"] == 0.25
    assert p["trainer_wait_s"]["median_s"] == 0.125 and p["weight_sync_s"]["n"] == 12
    # 12 steady steps x 4 rollouts, minus one (run-1 step 3 had 3), over 30.5 s
    assert report["throughput"]["rollouts_per_s"] == pytest.approx(47 / 30.5)
    # steady tokens/s: 300 400 500 600 (x2) + 300 400 500 -> sorted median (n=11) is 400
    assert report["throughput"]["trainer_tokens_per_s_median"] == 400
    ro = report["rollouts"]
    assert ro["episodes"] == 6
    assert ro["statuses"] == {"dropped_stale": 1, "infra_error": 1, "resolved": 3, "unresolved": 1}
    assert ro["success_by_task"]["a"] == {"resolved": 2, "scored": 3, "rate": pytest.approx(2 / 3)}
    assert ro["success_by_task"]["b"] == {"resolved": 1, "scored": 1, "rate": 1.0}  # infra excluded
    assert ro["success_by_task"]["c"] == {"resolved": 0, "scored": 0, "rate": None}


def test_incomplete_run_excluded_and_listed(report):
    assert [r["name"] for r in report["runs"]] == ["run-0", "run-1", "run-2"]
    assert report["excluded_runs"] == [{"name": "run-3",
                                        "reason": "incomplete: 3/6 versions served"}]


def test_headline_is_recomputable_from_the_reports_own_rows(report):
    """Every headline number follows from the per-step rows the report carries."""
    w = report["warmup_steps"]
    steady = [row["time_s"] for run in report["runs"] for row in run["steps"][w:]
              if row["event"] is None]
    s = summarize(steady)
    for key in ("median_s", "p90_s", "mean_s", "std_s", "cv", "min_s", "max_s"):
        assert report[f"step_time_{key}"] == s[key]


def test_written_report_is_recomputed_from_raw_files(tmp_path):
    root = write_bench(tmp_path / "bench", incomplete=False)
    first = write_bench_outputs(root, plots=False)
    on_disk = json.loads((root / "bench.json").read_text())
    assert on_disk["step_time_median_s"] == first["step_time_median_s"] == pytest.approx(2.5)
    assert "2.500s" in (root / "bench.md").read_text()
    # change one raw record: the report follows the raw files, not the previous bench.json
    weights = root / "run-0" / "weights.jsonl"
    recs = [json.loads(line) for line in weights.read_text().splitlines()]
    for r in recs[2:]:
        r["served_at_s"] += 10.0 * (r["version"] - 2)  # steady steps 2..5 of run-0 +10 s each
    weights.write_text("".join(json.dumps(r) + "\n" for r in recs))
    again = write_bench_outputs(root, plots=False)
    assert again["runs"][0]["steady"]["median_s"] == pytest.approx(12.0)
    assert json.loads((root / "bench.json").read_text())["runs"][0]["steady"]["median_s"] == 12.0


def test_all_incomplete_is_an_error(tmp_path):
    with pytest.raises(ValueError, match="no complete run"):
        build_bench_report([load_run(write_run(tmp_path / "run-0", [5, 2], steps=6))])


def test_config_differences_are_reported(tmp_path):
    a = load_run(write_run(tmp_path / "run-0", [5, 2, 2], steps=3))
    b = load_run(write_run(tmp_path / "run-1", [5, 2, 2], steps=3, groups_per_step=4))
    assert config_diff(a.config, b.config) == {"orchestrator.groups_per_step": (2, 4)}
    r = build_bench_report([a, b])
    assert r["config_differs_between_runs"] == ["orchestrator.groups_per_step"]


def test_single_run_dir_is_accepted(tmp_path):
    run = write_run(tmp_path / "only", [6, 2, 2, 2])
    assert find_run_dirs(run) == [run]
    with pytest.raises(FileNotFoundError):
        find_run_dirs(tmp_path / "nothing-here")


def test_batch_clock_is_the_orchestrators_interval_with_its_own_warmup(report, tmp_path):
    # the fixture's metrics time/step_s equal the served-clock step times: same warm-up, same stats
    clock = report["batch_clock"]
    assert clock["warmup_steps"] == 2 and clock["n"] == 12
    assert clock["mean_s"] == pytest.approx(STEADY_MEAN)
    assert clock["std_s"] == pytest.approx(STEADY_STD)
    # a run without time/step_s (older metrics) reports no batch clock instead of failing
    run = write_run(tmp_path / "old", [10, 4, 2, 2.25, 1.75, 2])
    (run / "metrics.jsonl").write_text("".join(
        json.dumps({"step": i, "rollout/episodes": 4}) + "\n" for i in range(6)))
    assert build_bench_report([load_run(run)])["batch_clock"]["n"] == 0
