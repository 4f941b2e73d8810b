"""`swefleet eval --server URL` checks at startup that the server serves the configured
`inference.model_name` (GET /v1/models on a real embedded engine server): a mismatch is one clear
config error (exit 2) naming the served models, before any task or episode."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
from swefleet.inference.config import InferenceConfig
from swefleet.inference.engine.settings import EngineSettings
from swefleet.inference.launch import start_embedded_server
from swefleet.inference.testing import tiny_checkpoint

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
TASKS = REPO / "envs/data/quickstart/tasks.jsonl"
SERVED = "policy"


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.getbasetemp() / "evals-served-models")


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    cfg = InferenceConfig(model_name=SERVED, cpu_threads=1, max_batch_size=2)
    log = tmp_path_factory.mktemp("evals-served-logs") / "server.log"
    settings = EngineSettings.from_inference(cfg, model_dir)
    with start_embedded_server(settings, log, startup_timeout_s=cfg.startup_timeout_s) as handle:
        yield handle


def _eval(
    tmp_path: Path, url: str, model_dir: Path, model_name: str
) -> subprocess.CompletedProcess:
    cfg = tmp_path / "eval.toml"
    cfg.write_text(f'[agent]\nmax_steps = 1\n[inference]\nmodel_name = "{model_name}"\n')
    argv = [
        sys.executable,
        "-m",
        "swefleet",
        "eval",
        "--tasks",
        str(TASKS),
        "--split",
        "heldout",
        "--server",
        url,
        "--model",
        str(model_dir),
        "--config",
        str(cfg),
        "--output-dir",
        str(tmp_path / "out"),
    ]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)


def test_unserved_model_name_fails_at_startup_naming_the_served_models(tmp_path, server, model_dir):
    proc = _eval(tmp_path, server.url, model_dir, "qwen3-typo")
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert "'qwen3-typo'" in errors[0] and f"serves: {SERVED}" in errors[0]
    assert server.url in errors[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "out" / "episodes.jsonl").exists()  # no episode ran


def test_served_name_passes_and_no_name_is_not_checked(server):
    from swefleet.evals.served import check_served_model

    assert check_served_model(server.url, SERVED, timeout_s=5.0) == [SERVED]
    assert check_served_model(server.url, "", timeout_s=5.0) == [SERVED]
    with pytest.raises(ValueError, match=f"does not serve model 'other'.*serves: {SERVED}$"):
        check_served_model(server.url, "other", timeout_s=5.0)


def test_unreachable_server_fails_at_startup(tmp_path, model_dir):
    with socket.socket() as sock:  # a loopback port nothing listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    proc = _eval(tmp_path, url, model_dir, SERVED)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert f"--server {url}: cannot read /v1/models" in proc.stderr
    assert not (tmp_path / "out" / "episodes.jsonl").exists()


@pytest.mark.parametrize("status, body", [(404, None), (200, b'{"object": "list"}')])
async def test_server_that_lists_no_models_is_not_checked(status, body, caplog):
    import asyncio

    from swefleet.evals.served import check_served_model
    from swefleet.inference.testing import RawServer

    async with RawServer(status, body) as raw:
        names = await asyncio.to_thread(check_served_model, raw.url, "any", 5.0)
        assert names is None and raw.requests == 1
    assert "does not list its models" in caplog.text
