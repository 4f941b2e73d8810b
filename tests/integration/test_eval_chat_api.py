"""`swefleet eval --api chat`: the agent through an OpenAI-compatible chat endpoint (the scripted
chat server, a real loopback process) in real Docker sandboxes on a quickstart task. The oracle's
replies (gold patch by `git apply`, then submit) resolve it with plain bash messages and with
native tool calls; a rate-limited endpoint ends the episode typed, the eval goes on; the report
names the API mode, the model and the endpoint, never the key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from swefleet.envs.tasks import load_tasks
from swefleet.trainer.sft_oracle import apply_command, oracle_replies

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "envs/data/quickstart/tasks.jsonl"
KEY = "sk-chat-test-secret"


def _oracle_script(scaffold: str) -> list[dict]:
    task = load_tasks(TASKS)[0]
    if scaffold == "bash":
        return [{"content": reply} for reply in oracle_replies(task, "bash")]
    command = json.dumps({"command": apply_command(task.patch)})
    return [{"tool_call": {"name": "bash", "arguments": command}},
            {"tool_call": {"name": "submit", "arguments": "{}"}}]


def _serve(tmp_path: Path, script: list[dict]) -> tuple[subprocess.Popen, str]:
    (tmp_path / "script.json").write_text(json.dumps(script))
    port_file = tmp_path / "port"
    proc = subprocess.Popen(
        [sys.executable, "-m", "swefleet.inference.scripted_chat_server", "--script",
         str(tmp_path / "script.json"), "--port-file", str(port_file),
         "--served-model-name", "chat-policy"],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while not port_file.exists():
        assert proc.poll() is None and time.monotonic() < deadline, "chat server did not start"
        time.sleep(0.05)
    return proc, f"http://127.0.0.1:{port_file.read_text()}"


def _eval(tmp_path: Path, url: str, scaffold: str) -> subprocess.CompletedProcess:
    cfg = tmp_path / "eval.toml"
    cfg.write_text(f'[agent]\nscaffold = "{scaffold}"\nmax_steps = 4\n'
                   '[inference]\napi_key_env = "SWEFLEET_TEST_CHAT_KEY"\nretry_backoff_s = 0.01\n')
    argv = [sys.executable, "-m", "swefleet", "eval", "--api", "chat", "--server", url,
            "--tasks", str(TASKS), "--slice", "0:1", "--config", str(cfg),
            "--output-dir", str(tmp_path / "out")]
    env = {**os.environ, "SWEFLEET_TEST_CHAT_KEY": KEY}
    return subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=600,
                          check=False)


@pytest.mark.parametrize("scaffold", ["bash", "tools"])
def test_oracle_replies_resolve_through_the_chat_endpoint(tmp_path, scaffold):
    server, url = _serve(tmp_path, _oracle_script(scaffold))
    try:
        proc = _eval(tmp_path, url, scaffold)
        requests = httpx.get(f"{url}/requests", trust_env=False).json()
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = tmp_path / "out"
    report = json.loads((out / "report.json").read_text())
    assert report["success_rate"] == 1.0 and report["n_episodes"] == 1
    assert (report["api"], report["model_name"], report["endpoint"]) == ("chat", "chat-policy", url)
    assert f"chat-policy via the chat API at {url}" in (out / "report.md").read_text()
    assert report["trained_overlap"]["record"] is None  # contamination: unknown, and said so
    assert "trained tasks: **unknown** (a chat endpoint" in (out / "report.md").read_text()
    assert all(r["authorization"] == f"Bearer {KEY}" for r in requests)
    assert all(r["body"]["model"] == "chat-policy" for r in requests)
    assert ("tools" in requests[0]["body"]) == (scaffold == "tools")
    (traj_file,) = (out / "trajectories").rglob("*.json")
    traj = json.loads(traj_file.read_text())
    assert traj["api"] == "chat" and traj["status"] == "resolved"
    assert traj["turns"][0]["prompt_ids"] == [] and traj["turns"][0]["messages"][0]["role"] == "system"
    written = [p for p in out.rglob("*") if p.is_file()]
    assert not [p for p in written if KEY in p.read_text(errors="replace")]  # the key: nowhere


def test_a_rate_limited_endpoint_ends_the_episode_typed(tmp_path):
    server, url = _serve(tmp_path, [{"status": 429, "retry_after": 0}])
    try:
        proc = _eval(tmp_path, url, "bash")
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (record,) = [json.loads(x) for x in (tmp_path / "out/episodes.jsonl").read_text().splitlines()]
    assert record["status"] == "infra_error" and "overload" in record["reason"]
    assert record["resolved"] is None and "Traceback" not in proc.stderr


def test_bad_chat_arguments_are_one_line_errors(tmp_path):
    base = [sys.executable, "-m", "swefleet", "eval", "--api", "chat", "--tasks", str(TASKS),
            "--output-dir", str(tmp_path / "out")]
    two = subprocess.run([*base, "--server", "http://127.0.0.1:9", "--server",
                          "http://127.0.0.1:10"], cwd=REPO, capture_output=True, text=True,
                         check=False)
    assert two.returncode == 2 and "exactly one --server" in two.stderr
    unset = subprocess.run([*base, "--server", "http://127.0.0.1:9", "--set",
                            "inference.api_key_env=SWEFLEET_UNSET_KEY_VAR"], cwd=REPO,
                           capture_output=True, text=True, check=False,
                           env={k: v for k, v in os.environ.items()
                                if k != "SWEFLEET_UNSET_KEY_VAR"})
    assert unset.returncode == 2 and "SWEFLEET_UNSET_KEY_VAR" in unset.stderr
    assert "Traceback" not in two.stderr + unset.stderr
    assert not (tmp_path / "out").exists()
