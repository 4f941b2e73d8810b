"""Periodic events in the bench: a trainer checkpoint's steps land in their own row, not in the
steady statistics (run files shaped like the trainer's and orchestrator's records)."""

import statistics

import pytest
from swefleet.evals.bench_data import find_run_dirs, load_run
from swefleet.evals.bench_events import label_events
from swefleet.evals.bench_markdown import bench_markdown
from swefleet.evals.bench_report import build_bench_report
from swefleet.evals.compare import steady_samples

from tests.unit.evals_bench_fixture import write_run

pytestmark = pytest.mark.unit

# checkpoint_every 10, 12 steps: the checkpoint started after step 9 holds up step 10 (15-16 s
# against ~7 s) and step 11 is short (its batch was ready): the H200 pattern. Warm-up: steps 0-1.
TIMES = {
    "run-0": [20, 3, 7, 7.2, 6.8, 7, 7.1, 6.9, 7, 7, 15, 2.6],
    "run-1": [18, 2.8, 7.1, 6.9, 7, 7.2, 6.8, 7, 7.1, 6.9, 16, 2.4],
}
STEADY = [t for times in TIMES.values() for t in times[2:10]]  # median 7.0


def _report(tmp_path, times=TIMES, steps=12, every=10):
    for name, ts in times.items():
        write_run(tmp_path / name, ts, steps=steps, checkpoint_every=every)
    return build_bench_report([load_run(p) for p in find_run_dirs(tmp_path)])


def test_checkpoint_steps_are_labelled_from_the_trainer_record(tmp_path):
    run = load_run(write_run(tmp_path / "r", TIMES["run-0"], steps=12, checkpoint_every=10))
    assert run.rows[9]["checkpoint_blocking_s"] == 7.5 and run.rows[8]["checkpoint_blocking_s"] == 0
    assert [r["event"] for r in run.rows] == [None] * 10 + ["checkpoint", "after_checkpoint"]
    # checkpoints off (no checkpoint fields in the trainer records): nothing labelled
    off = load_run(write_run(tmp_path / "off", TIMES["run-0"], steps=12))
    assert {r["event"] for r in off.rows} == {None} and off.rows[9]["checkpoint_blocking_s"] is None


def test_checkpoint_steps_leave_the_steady_statistics(tmp_path):
    r = _report(tmp_path)
    assert r["warmup_steps"] == 2 and r["steady_state_steps"] == len(STEADY) == 16
    assert r["step_time_median_s"] == pytest.approx(7.0)
    assert r["step_time_mean_s"] == pytest.approx(statistics.mean(STEADY))
    assert r["step_time_cv"] == pytest.approx(statistics.stdev(STEADY) / statistics.mean(STEADY))
    assert r["step_time_cv"] < 0.05 and r["step_time_max_s"] == pytest.approx(7.2)
    with_events = [t for times in TIMES.values() for t in times[2:]]
    assert statistics.stdev(with_events) / statistics.mean(with_events) > 0.3  # what they hid
    assert [run["steady"]["n"] for run in r["runs"]] == [8, 8]
    assert r["runs"][0]["steady"]["max_s"] == pytest.approx(7.2)
    # report compare recomputes from the same rows, with the same steps left out
    samples = steady_samples(r, "time_s")
    assert samples == [pytest.approx(TIMES["run-0"][2:10]), pytest.approx(TIMES["run-1"][2:10])]


def test_checkpoint_row_counts_median_and_extra_seconds(tmp_path):
    ev = _report(tmp_path)["periodic_events"]
    assert ev["checkpoint_every"] == 10 and ev["checkpoints"] == 2 and ev["note"] is None
    ckpt, after = ev["events"]["checkpoint"], ev["events"]["after_checkpoint"]
    assert ckpt["n"] == 2
    assert [ckpt["median_s"], ckpt["min_s"], ckpt["max_s"]] == pytest.approx([15.5, 15, 16])
    assert ckpt["extra_s"] == pytest.approx(15.5 - 7.0)
    assert after["n"] == 2 and after["median_s"] == pytest.approx(2.5)
    assert after["extra_s"] == pytest.approx(2.5 - 7.0)
    # both steps over four steady ones, per checkpoint: (15 + 16 + 2.6 + 2.4 - 4 * 7) / 2
    assert ev["net_extra_s_per_checkpoint"] == pytest.approx(4.0)


def test_markdown_shows_the_event_row_and_marks_its_steps(tmp_path):
    md = bench_markdown(_report(tmp_path))
    assert "## Periodic events" in md and "2 trainer checkpoint(s)" in md
    row = next(line for line in md.splitlines() if line.startswith("| checkpoint ("))
    assert "| 2 | 15.500s | 15.000s / 16.000s | +8.500s |" in row
    assert "| net cost per checkpoint (both steps) | | | | +4.000s |" in md
    assert "7.00 15.00* 2.60* |" in md and "| coefficient of variation | 1." in md


def test_runs_too_short_for_a_checkpoint_say_so(tmp_path):
    short = {name: times[:10] for name, times in TIMES.items()}
    ev = _report(tmp_path / "short", short, steps=10)["periodic_events"]
    assert ev["checkpoints"] == 0 and ev["events"]["checkpoint"]["n"] == 0
    assert "need at least 12" in ev["note"]
    assert "None: no trainer checkpoint inside the runs" in bench_markdown(
        _report(tmp_path / "short2", short, steps=10))
    off = _report(tmp_path / "off", every=None)["periodic_events"]
    assert "checkpoints are off" in off["note"]


def test_checkpoints_one_step_apart_label_each_step_once():
    rows = [{"step": i} for i in range(8)]
    label_events(rows, [3, 4])
    assert [r["event"] for r in rows] == [None] * 4 + ["checkpoint", "checkpoint",
                                                       "after_checkpoint", None]
