"""benchmarks/keepalive.py runs both server sockets and prints its JSON contract."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "keepalive.py"


def test_both_sockets_are_measured_and_the_ratio_is_of_their_medians():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--requests", "10", "--prompt-len", "16",
                           "--gen-len", "4"], capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    plain, ours = out["plain"], out["swefleet"]
    assert out["requests"] == 10 and 0 < plain["median_ms"] <= plain["p90_ms"]
    assert out["ratio_median"] == pytest.approx(plain["median_ms"] / ours["median_ms"])
