"""`swefleet demo` on the quickstart config, shortened, then again on its finished folder: the
second run runs nothing (no server, no trainer, no sandbox) and changes nothing in the folder,
its summary and stage times included."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
SHORT = ("tasks.limit=2", "sft.steps=3", "orchestrator.steps=1", "orchestrator.groups_per_step=1",
         "orchestrator.rollouts_per_task=2", "orchestrator.max_concurrent_episodes=2",
         "final_eval.k=1")


def _demo(out: Path) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "swefleet", "demo", "--config",
           str(REPO / "configs/quickstart.toml"), "--output-dir", str(out)]
    for item in SHORT:
        cmd += ["--set", item]
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=1200,
                          check=False)


def _files(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under `root` -> (size, mtime in ns): what a write would change."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_a_finished_demo_run_again_runs_nothing_and_changes_nothing(tmp_path):
    out = tmp_path / "demo"
    first = _demo(out)
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-5000:]
    summary, times = (out / "demo_summary.md").read_bytes(), (out / "demo_times.json").read_text()
    assert "| rl (train) |" in summary.decode() and '"rl"' in times
    assert "# swefleet demo run folder" in (out / "index.md").read_text()
    assert not any("not written by swefleet" in p.read_text() for p in out.rglob("index.md"))
    before = _files(out)

    again = _demo(out)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-5000:]
    log = again.stdout + again.stderr
    assert log.count("(done, kept)") == 3  # sft, rl, eval
    assert "all 1 steps are done" in log and "nothing ran, nothing changed" in log
    assert summary.decode() in again.stdout  # the saved table, shown as it is
    assert _files(out) == before  # no server or trainer log, no record, no plot rewritten
    assert (out / "demo_summary.md").read_bytes() == summary
    assert (out / "demo_times.json").read_text() == times
