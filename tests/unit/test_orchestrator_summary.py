"""The end-of-run table: each step's trainer KLs, `-` where a step had no tokens of a kind."""

from __future__ import annotations

import pytest
from swefleet.orchestrator.summary import print_summary

from swefleet.rundir import RunDir, append_jsonl

pytestmark = pytest.mark.unit


def test_table_shows_mismatch_and_staleness_and_a_dash_for_none(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "200")
    run = RunDir(tmp_path / "run")
    append_jsonl(run.episodes, {"status": "resolved", "timings": {"total": 2.0}})
    for rec in ({"loss": 0.5, "mismatch_kl": 2.5e-5, "staleness_kl": None,
                 "stale_token_fraction": 0.0},
                {"loss": 0.25, "mismatch_kl": None, "staleness_kl": 0.0312,
                 "stale_token_fraction": 1.0}):
        append_jsonl(run.trainer_metrics, rec)
    steps = [{"step": i, "time/step_s": 1.0, "rollout/episodes": 1, "rollout/reward_mean": 1.0}
             for i in range(2)]
    print_summary(run, steps, wall_s=2.0, served_version=2)
    rows = [line for line in capsys.readouterr().out.splitlines() if "│ 0.5 " in line
            or "│ 0.25 " in line]
    assert len(rows) == 2, rows
    cells = [[c.strip() for c in row.split("│")[1:-1]] for row in rows]
    assert cells[0][-3:] == ["2.5e-05", "-", "0%"]
    assert cells[1][-3:] == ["-", "0.0312", "100%"]
