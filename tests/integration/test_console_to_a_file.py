"""The real `swefleet` script with its output redirected to files (as `make run > log`, CI or
Slurm do): plain lines, no colour codes, no progress bar, nothing cut; `report compare` of evals
without a shared task is one error line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SWEFLEET = str(Path(sys.executable).parent / "swefleet")
TASKS = str(ROOT / "envs/data/quickstart/tasks.jsonl")


def _run_to_files(tmp_path: Path, *argv: str) -> tuple[int, str, str]:
    out, err = tmp_path / "stdout.log", tmp_path / "stderr.log"
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    with out.open("w") as fo, err.open("w") as fe:
        rc = subprocess.run([SWEFLEET, *argv], cwd=tmp_path, stdout=fo, stderr=fe, timeout=600,
                            env={**env, "COLUMNS": "40"}, check=False).returncode
    return rc, out.read_text(), err.read_text()


def test_eval_with_output_in_a_file_is_plain_and_whole(tmp_path):
    run_dir = tmp_path / ("a-long-output-folder-name-" * 4).rstrip("-")
    rc, out, err = _run_to_files(tmp_path, "eval", "--agent", "empty", "--tasks", TASKS,
                                 "--split", "heldout", "--output-dir", str(run_dir))
    assert rc == 0, err[-3000:]
    for text in (out, err):
        assert "\x1b" not in text and "…" not in text and "━" not in text, text
    assert "eval resolved=0 unresolved=3 errors=0: 3/3 in " in out  # the bar's one plain line
    assert "# swefleet eval" in out


def test_compare_of_evals_without_a_shared_task_is_one_error_line(tmp_path):
    from swefleet.evals.report import build_report

    for name, task in (("a", "x"), ("b", "y")):
        records = [{"task_id": f"{task}{i}", "attempt": 0, "resolved": name == "a"}
                   for i in range(9)]
        (tmp_path / f"{name}.json").write_text(json.dumps(build_report(records, k=1)))
    rc, out, err = _run_to_files(tmp_path, "report", "compare", "a.json", "b.json")
    assert rc != 0 and out == ""
    assert err.count("\n") == 1 and "no shared tasks" in err, err
    assert "no paired test possible" in err
