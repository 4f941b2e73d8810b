"""`benchmarks/trainer.py` on CPU (tiny preset): both sides train, the last line is the JSON the
docs record (tokens/s of ours and of transformers, device, per-variant median and spread)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


def test_tiny_run_prints_headline_and_spread_json():
    proc = subprocess.run(
        [sys.executable, "benchmarks/trainer.py", "--preset", "tiny", "--warmup", "1", "--steps", "3"],
        cwd=REPO, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["device"] == "cpu" and out["model"] == "tiny"
    assert out["tokens_per_s"] > 0 and out["hf_tokens_per_s"] > 0
    assert out["speedup"] == pytest.approx(out["tokens_per_s"] / out["hf_tokens_per_s"])
    assert [v["name"] for v in out["variants"]] == ["ours", "hf"]
    for v in out["variants"]:
        assert v["error"] is None
        assert 0 < v["step_s_min"] <= v["step_s"] <= v["step_s_max"], v
