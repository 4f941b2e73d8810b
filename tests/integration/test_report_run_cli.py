"""`swefleet report run DIR` through the installed entry point, on a hand-made demo folder."""

import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.run_folder_fixture import write_demo

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
SWEFLEET = REPO / ".venv" / "bin" / "swefleet"
PNG = b"\x89PNG\r\n\x1a\n"


def _swefleet(*args: str) -> subprocess.CompletedProcess:
    exe = [str(SWEFLEET)] if SWEFLEET.exists() else [sys.executable, "-m", "swefleet"]
    return subprocess.run([*exe, *args], cwd=REPO, capture_output=True, text=True, timeout=300,
                          check=False)


def test_report_run_redraws_a_demo_folder_and_refuses_other_folders(tmp_path):
    demo = write_demo(tmp_path / "demo")
    proc = _swefleet("report", "run", str(demo))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "reward.png: drawn" in proc.stdout
    for folder, pngs in ((demo, ["reward.png", "loss.png", "kl.png", "entropy.png",
                                 "step_time.png", "drop_rate.png", "p_demonstrations.png"]),
                         (demo / "sft", ["loss.png"]),
                         (demo / "eval-heldout", ["success_by_task.png", "pass_at_k.png"])):
        assert sorted(p.name for p in folder.glob("*.png")) == sorted(pngs), folder
        assert all((folder / name).read_bytes()[:8] == PNG for name in pngs)
        index = (folder / "index.md").read_text()
        assert all(f"| `{name}` | plot: " in index for name in pngs)

    proc = _swefleet("report", "run", str(tmp_path))
    assert proc.returncode == 2
    assert proc.stderr.strip().count("\n") == 0 and "not a run folder" in proc.stderr


def test_the_run_report_modules_import_no_matplotlib():
    code = ("import sys, swefleet.evals.run_report, swefleet.evals.plots_train, "
            "swefleet.evals.plots_eval; sys.exit('matplotlib' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, check=False)
    assert proc.returncode == 0
