"""Recording copies of a test file run by real pytest (the in-scope probe recorder's tests)."""

from __future__ import annotations

import subprocess
import sys

from swefleet.envs.synth.scope_probe import read_values, recording_file


def record_with_pytest(tmp_path, name: str, tests: str, exprs: dict[str, list[str]]):
    """Run the recording copies of `tests` (saved as tests/`name` under `tmp_path`) with real
    pytest: (the finished process, each expression's recorded value)."""
    out = tmp_path / "values.jsonl"
    text, keys = recording_file(tests, exprs, str(out))
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / name).write_text(text)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                          "-o", "addopts=", "-k", "sfrec", f"tests/{name}"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=False)
    values = read_values(out.read_text(), keys) if out.exists() else {}
    return run, {keys[k][1]: v for k, v in values.items()}
