"""`swefleet rl` and `swefleet eval --agent model` on the fleet one config describes: several
launched embedded servers, external servers (`--server`, repeatable), and `vllm serve` servers
(a fake `vllm` command that records its argv and runs the scripted server, which emulates vLLM's
weight-update routes). CPU, tiny model, 2 steps."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from swefleet.inference.launch import start_scripted_server

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "envs/data/quickstart/tasks.jsonl"
STEPS = 2


@pytest.fixture
def rl_config(toy_rl_config):
    """`rl_config(inference) -> Path`: the run of these tests on the fleet `inference` says."""

    def write(inference: str) -> Path:
        return toy_rl_config("topology", f'model_name = "policy"\n{inference}',
                             f"steps = {STEPS}\nrollouts_per_task = 4\n"
                             "max_concurrent_episodes = 8\nasync_level = 1")

    return write


def run_cli(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "swefleet", *argv], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, check=False)


def rl(tmp_path: Path, config: Path, *extra: str) -> dict:
    out = tmp_path / "run"
    proc = run_cli("rl", "--config", str(config), "--output-dir", str(out), *extra)
    assert proc.returncode == 0, proc.stderr[-5000:]
    return json.loads((out / "summary.json").read_text())


def assert_all_served(summary: dict, n: int) -> None:
    """Every server answered requests and serves the final policy version."""
    servers = summary["servers"]
    assert len(servers) == n, servers
    for url, counts in servers.items():
        assert counts["completed"] > 0, (url, servers)
        assert counts["policy_version"] == STEPS, (url, servers)


def test_rl_on_two_launched_embedded_servers(tmp_path, rl_config):
    config = rl_config("num_servers = 2\ncpu_threads = 1\n")
    assert_all_served(rl(tmp_path, config), 2)
    for i in range(2):  # each its own process and log, each loaded every version
        log = (tmp_path / "run" / "logs" / f"server-{i}.log").read_text()
        assert f"serving policy version {STEPS}" in log


def test_rl_on_external_servers(tmp_path, rl_config):
    # scripted servers (no model: quick to start) speak the embedded engine's API, versions too
    with (start_scripted_server(log_path=tmp_path / "a.log") as a,
          start_scripted_server(log_path=tmp_path / "b.log") as b):
        config = rl_config("")
        summary = rl(tmp_path, config, "--server", a.url, "--server", b.url)
        assert_all_served(summary, 2)
        assert set(summary["servers"]) == {a.url, b.url}
        for url in (a.url, b.url):  # the servers themselves moved to the final version
            assert httpx.get(f"{url}/health", trust_env=False).json()["policy_version"] == STEPS
    assert not (tmp_path / "run" / "logs" / "server-0.log").exists()  # nothing launched


def test_rl_on_launched_vllm_servers(tmp_path, model_dir, fake_vllm, rl_config):
    record = tmp_path / "vllm-calls.jsonl"
    config = rl_config(f"""kind = "vllm"
num_servers = 2
gpus = [4, 5, 6, 7]
[inference.vllm]
tensor_parallel_size = 2
max_model_len = 4096
executable = "{fake_vllm}"
env = {{ FAKE_VLLM_RECORD = "{record}" }}
""")
    assert_all_served(rl(tmp_path, config), 2)
    calls = [json.loads(line) for line in record.read_text().splitlines()]
    # the servers start at the same time: their calls are recorded in either order
    assert sorted(c["env"]["CUDA_VISIBLE_DEVICES"] for c in calls) == ["4,5", "6,7"]
    for call in calls:
        argv, env = call["argv"], call["env"]
        assert argv[:2] == ["serve", str(model_dir)]
        for flag, value in [("--served-model-name", "policy"), ("--tensor-parallel-size", "2"),
                            ("--gpu-memory-utilization", "0.9"), ("--max-model-len", "4096")]:
            assert argv[argv.index(flag) + 1] == value, (flag, argv)
        assert env["VLLM_SERVER_DEV_MODE"] == "1" and env["NCCL_NVLS_ENABLE"] == "0"
        assert env["TORCH_SYMM_MEM_DISABLE_MULTICAST"] == "1"
    ports = {c["argv"][c["argv"].index("--port") + 1] for c in calls}
    assert len(ports) == 2


def test_vllm_kind_without_vllm_is_one_line_and_exit_2(tmp_path, rl_config):
    missing = tmp_path / "nowhere" / "vllm"
    config = rl_config(f'kind = "vllm"\n[inference.vllm]\nexecutable = "{missing}"\n')
    proc = run_cli("rl", "--config", str(config), "--output-dir", str(tmp_path / "run"))
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "kind='vllm' needs vLLM 0.26.0 installed (pip install 'swefleet[vllm]')" in errors[0]
    assert not (tmp_path / "run").exists()  # refused before any setup


def test_eval_on_two_launched_servers(tmp_path, model_dir):
    cfg = tmp_path / "eval.toml"
    cfg.write_text("[agent]\nmax_steps = 1\nmax_tokens_per_turn = 16\n"
                   "context_budget_tokens = 4096\n"
                   '[inference]\nmodel_name = "policy"\nnum_servers = 2\ncpu_threads = 1\n')
    out = tmp_path / "eval"
    proc = run_cli("eval", "--agent", "model", "--tasks", str(TASKS), "--split", "heldout",
                   "--model", str(model_dir), "--config", str(cfg), "--output-dir", str(out),
                   timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads((out / "report.json").read_text())
    assert report["n_episodes"] == 3 and report["tokens_mean"] > 0
    assert report["endpoint"] == "embedded servers this eval started"  # what served, by kind
    served = [line for line in proc.stderr.splitlines() if " completions, " in line]
    assert len(served) == 2, proc.stderr[-3000:]  # two servers, both answered requests
    assert all(" 0 completions" not in line for line in served), served
    assert all((out / "logs" / f"server-{i}.log").exists() for i in range(2))
