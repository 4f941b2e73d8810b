"""`benchmarks/plan_vs_measured.py` on CPU (tiny preset): the trainer, the embedded engine and
the weight export really run, and the last line's JSON holds every predicted and measured
figure, each positive, with ratio = measured / predicted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]

QUANTITIES = {"trainer tokens/s (ac=none)", "trainer peak allocated (ac=none)",
              "trainer state after a step", "engine weights", "KV bytes per token",
              "engine KV capacity", "weight sync bytes", "weight export (write)",
              "engine reload (read + copy)", "weight sync, filesystem"}


def test_cpu_run_prints_every_row_and_the_json():
    proc = subprocess.run(
        [sys.executable, "benchmarks/plan_vs_measured.py", "--device", "cpu", "--preset", "tiny",
         "--seq-len", "64", "--batch", "2", "--warmup", "1", "--steps", "2", "--vllm", "no"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    lines = proc.stdout.strip().splitlines()
    out = json.loads(lines[-1])
    assert (out["device"], out["preset"], out["seq_len"], out["batch"]) == ("cpu", "tiny", 64, 2)
    assert out["errors"] == {}
    rows = {r["quantity"]: r for r in out["rows"]}
    assert set(rows) == QUANTITIES
    for r in out["rows"]:
        assert r["predicted"] > 0 and r["measured"] > 0, r
        assert r["ratio"] == pytest.approx(r["measured"] / r["predicted"]), r
        assert any(line.startswith(r["quantity"]) for line in lines), r["quantity"]
    # exact terms: the cache the engine allocated and the bytes the export wrote
    assert rows["KV bytes per token"]["ratio"] == pytest.approx(1.0)
    assert rows["weight sync bytes"]["ratio"] == pytest.approx(1.0, rel=0.02)
    assert out["checks"]["planner_flops"] == pytest.approx(out["checks"]["trainer_flops"])
    assert out["layout"]["model"]["hidden_size"] == 64
