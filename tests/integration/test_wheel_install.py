"""The built wheel installs next to `openai-agents` (whose import name is `agents`) in a fresh
virtual environment, and both import: swefleet's rooms live under `swefleet.` only.

Needs PyPI (or the configured index) for `openai-agents`; skips, saying so, when it is out of
reach."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.wheel_build import build_wheel, foreign_top_level

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

CHECK = """
import agents, swefleet, swefleet.agents, swefleet.envs, swefleet.app.cli
assert agents.__file__ != swefleet.agents.__file__, agents.__file__
assert hasattr(agents, "Runner"), "`agents` is not openai-agents"
assert "site-packages" in swefleet.__file__, swefleet.__file__
print("ok", agents.__file__, swefleet.agents.__file__)
"""


def _run(cmd: list, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)  # fmt: skip


def _index_reachable(pip: list, cwd: Path) -> str:
    """'' when pip can download from its index, else the reason it cannot."""
    probe = _run([*pip, "download", "--no-deps", "-q", "-d", cwd / "probe", "openai-agents"], cwd,
                 timeout=120)
    return "" if probe.returncode == 0 else (probe.stderr.strip().splitlines() or ["?"])[-1]


def test_wheel_installs_next_to_openai_agents(tmp_path):
    wheel = build_wheel(tmp_path / "build")
    assert foreign_top_level(wheel) == set()
    venv = tmp_path / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", venv], tmp_path)
    assert made.returncode == 0, made.stderr
    py = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", py, "--disable-pip-version-check"]
    reason = _index_reachable(pip, tmp_path)
    if reason:
        pytest.skip(f"PyPI unreachable, cannot install openai-agents: {reason}")
    # openai-agents with its dependencies, and of swefleet's only what importing its rooms'
    # packages needs (jinja2, numpy; pydantic comes with openai-agents): no torch
    for args in (["openai-agents", "jinja2", "numpy"], ["--no-deps", wheel]):
        inst = _run([*pip, "install", "-q", *args], tmp_path)
        assert inst.returncode == 0, inst.stdout[-2000:] + inst.stderr[-2000:]
    check = _run([py, "-c", CHECK], tmp_path)
    assert check.returncode == 0 and check.stdout.startswith("ok"), check.stdout + check.stderr
    version = _run([venv / "bin" / "swefleet", "--version"], tmp_path)
    assert version.returncode == 0 and version.stdout.startswith("swefleet "), version.stderr
    # installing swefleet left openai-agents' `agents` alone, and the reverse
    listing = _run([*pip, "show", "-f", "swefleet"], tmp_path)
    files = [line.strip() for line in listing.stdout.splitlines() if line.startswith("  ")]
    assert files and not [f for f in files if f.startswith("agents/")], files[:20]
