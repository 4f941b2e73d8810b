"""`swefleet report bench|compare|eval` through the real CLI, on hand-made run directories."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.evals_bench_fixture import write_bench

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"


def _swefleet(*args: str) -> subprocess.CompletedProcess:
    proc = subprocess.run([sys.executable, "-m", "swefleet", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    return proc


def test_report_bench_and_compare_via_cli(tmp_path):
    a, b = write_bench(tmp_path / "a"), write_bench(tmp_path / "b", scale=2.0)
    proc = _swefleet("report", "bench", str(a))
    assert "# swefleet bench" in proc.stdout and "| median | 2.500s |" in proc.stdout
    report = json.loads((a / "bench.json").read_text())
    assert report["schema"] == "swefleet.bench/2"
    # the interface the issue names, with the fixture's hand-computed values
    assert report["step_time_median_s"] == pytest.approx(2.5)
    assert report["step_time_p90_s"] == pytest.approx(3.0)
    assert report["step_time_cv"] == pytest.approx(((80.375 - 30.5**2 / 12) / 11) ** 0.5
                                                    / (30.5 / 12))
    assert report["warmup_steps"] == 2
    assert [r["name"] for r in report["runs"]] == ["run-0", "run-1", "run-2"]
    for png in ("step_time.png", "step_time_hist.png", "phases.png", "success_by_task.png"):
        assert (a / png).read_bytes()[:8] == PNG, png
        assert f"]({png})" in (a / "bench.md").read_text()

    _swefleet("report", "bench", str(b), "--no-plots")
    assert not (b / "step_time.png").exists()
    out = tmp_path / "cmp.json"
    proc = _swefleet("report", "compare", str(a / "bench.json"), str(b / "bench.json"),
                     "--json", str(out), "--n-boot", "300")
    assert "step_time_median_s" in proc.stdout and "beyond noise" in proc.stdout
    rows = {r["metric"]: r for r in json.loads(out.read_text())["rows"]}
    assert rows["step_time_median_s"]["delta"] == pytest.approx(2.5)
    assert rows["step_time_median_s"]["beyond_noise"] is True


def test_report_eval_via_cli(tmp_path):
    episodes = [{"task_id": t, "attempt": i, "resolved": r, "tokens": 5, "wall_s": 1.0}
                for t, outs in {"a": [True, False], "b": [False, None]}.items()
                for i, r in enumerate(outs)]
    (tmp_path / "episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    _swefleet("report", "eval", str(tmp_path))
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["schema"] == "swefleet.eval/2"
    assert report["success_rate"] == pytest.approx(0.25)  # (1/2 + 0/1) / 2, infra excluded
    assert report["pass_at_k"]["2"] == pytest.approx(1.0)  # k inferred: 2 attempts per task
    assert (tmp_path / "success_by_task.png").read_bytes()[:8] == PNG


def test_cli_help_and_imports_stay_light():
    proc = _swefleet("report", "--help")
    assert "compare" in proc.stdout
    code = ("import sys, swefleet.app.cli, swefleet.app.bench, swefleet.app.report, "
            "swefleet.evals.compare, swefleet.evals.bench_report; bad = [m for m in ('matplotlib', 'torch', 'docker') "
            "if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, check=False)
    assert proc.returncode == 0, proc.stdout
