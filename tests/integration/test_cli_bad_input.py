"""Bad arguments stop the real `swefleet` script at once: one line `swefleet <cmd>: error: ...`,
exit code 2, before any image, server or folder work (the working directory stays empty)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
SWEFLEET = str(Path(sys.executable).parent / "swefleet")
TASKS = str(ROOT / "envs/data/quickstart/tasks.jsonl")
EVAL = ["eval", "--tasks", TASKS, "--output-dir", "out"]


@pytest.mark.parametrize(("argv", "says"), [
    ([*EVAL, "--agent", "model", "--model", "/nonexistent"],
     "--model /nonexistent does not exist (not an HF checkpoint)"),
    ([*EVAL, "--agent", "model"], "--agent model needs --model DIR"),
    ([*EVAL, "--agent", "predictions"], "--agent predictions needs --predictions FILE"),
    ([*EVAL, "--agent", "oracle", "-k", "0"], "argument -k: must be >= 1, got 0"),
    ([*EVAL, "--agent", "oracle", "--set", "agent.max_step=3"],
     "--set agent.max_step: no such config field (did you mean agent.max_steps?)"),
    (["eval", "--agent", "oracle", "--tasks", "missing.jsonl", "--output-dir", "out"],
     "--tasks missing.jsonl: no such task file"),
    (["tasks", "validate", "--tasks", "missing.jsonl"], "--tasks missing.jsonl: no such task"),
    (["tasks", "generate", "--recipe", "missing.toml", "--tasks", "t.jsonl"],
     "--recipe missing.toml: no such file"),
    (["sft", "--config", "missing.toml", "--output-dir", "out"], "missing.toml: no such config"),
    (["rl", "--config", str(ROOT / "configs/quickstart.toml"), "--output-dir", "out",
      "--set", "orchestrator.stepz=2"], "(did you mean orchestrator.steps?)"),
])  # fmt: skip
def test_bad_arguments_stop_before_any_work(tmp_path, argv, says):
    done = subprocess.run([SWEFLEET, *argv], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    words = " ".join(argv[:2]) if argv[0] == "tasks" else argv[0]
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith(f"swefleet {words}: error: "), done.stderr
    assert done.stderr.count("\n") == 1 and says in done.stderr, done.stderr
    assert done.stdout == "" and list(tmp_path.iterdir()) == []
