"""benchmarks/vllm_fleet.py: its client half against the scripted server (CPU), its JSON contract,
and a one-line exit 2 where vLLM or CUDA is missing."""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "vllm_fleet.py"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=120, check=False)


def test_fleet_half_against_the_scripted_server_prints_the_json_contract():
    proc = _run("--server-kind", "scripted", "--prompts", "8", "--prompt-len", "32",
                "--gen-len", "16", "--offline-tok-s", "1000")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.strip().splitlines()
    out = json.loads(lines[-1])
    assert {"offline_tok_s", "fleet_tok_s", "ratio", "plain_http_tok_s", "client_cpu_s",
            "fleet_tokens", "server_startup_s"} <= out.keys()
    assert out["fleet_tokens"] == 8 * 16 and out["fleet_exact_tokens"]
    assert out["fleet_tok_s"] == pytest.approx(out["fleet_tokens"] / out["fleet_s"])
    assert out["ratio"] == pytest.approx(out["fleet_tok_s"] / 1000)
    assert 0 < out["client_cpu_s"] < out["fleet_s"] * 2 and out["offline_tokens"] is None
    assert any(line.startswith("ratio fleet / offline") for line in lines)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed")
def test_without_vllm_it_exits_2_with_one_line():
    proc = _run()
    assert proc.returncode == 2
    assert proc.stdout == "" and proc.stderr.count("\n") == 1 and "vLLM" in proc.stderr
