"""Shared pytest fixtures. Append new fixtures with a clearly named section; keep imports lazy."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

# --- the machine: free disk, shown in the header ----------------------------------------------


def pytest_report_header(config):
    """Free space where the tests write: the trainer's exports wait while less than
    `trainer.disk_min_free_gb` (1 GB) is free, so a nearly full disk shows up as slow runs."""
    import tempfile

    from swefleet.diskspace import GB, free_bytes

    where = {"tmp": tempfile.gettempdir(), "repo": str(config.rootpath)}
    return "free disk: " + ", ".join(f"{name} {free_bytes(p) / GB:.1f} GB" for name, p in where.items())


# --- envs sandbox layer: no leaked containers, a tiny task image ----------------------------


def _swefleet_containers_of_this_process(client) -> list:
    owner = f"{socket.gethostname()}:{os.getpid()}"
    return client.containers.list(all=True, filters={"label": f"swefleet.owner={owner}"})


@pytest.fixture(scope="session", autouse=True)
def swefleet_no_leaked_containers():
    """After the whole session, no container labelled `swefleet.run` that this test process
    created (label `swefleet.owner=<host>:<pid>`) may remain. Skipped without a Docker daemon."""
    yield
    try:
        import docker

        client = docker.from_env(version="auto", timeout=30)
        client.ping()
    except Exception:  # noqa: BLE001 - no daemon: nothing can have leaked
        return
    deadline = time.monotonic() + 10  # containers that just ended are being auto-removed
    left = _swefleet_containers_of_this_process(client)
    while left and time.monotonic() < deadline:
        time.sleep(0.5)
        left = _swefleet_containers_of_this_process(client)
    for c in left:
        c.remove(force=True)
    assert not left, f"leaked swefleet containers: {[c.name for c in left]}"


@pytest.fixture(scope="session")
def envs_tiny_task(tmp_path_factory):
    """A `Task` whose image (built by `envs.images.ensure_task_image`, content-addressed, so
    reused across runs) holds a two-file git repository at /testbed."""
    from swefleet.envs.images import DEFAULT_BASE_IMAGE, ensure_task_image, image_exists

    from swefleet.types import Task

    if not image_exists(DEFAULT_BASE_IMAGE):
        pytest.skip(f"base image {DEFAULT_BASE_IMAGE} missing: run `make base-image`")
    src = tmp_path_factory.mktemp("tiny_repo")
    (src / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (src / "test_calc.py").write_text(
        "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n"
    )
    task = Task(instance_id="tiny__calc-1", repo="tiny/calc", problem_statement="add subtracts")
    task.image = ensure_task_image(task, src)
    return task


# --- agents: a small trained tokenizer --------------------------------------------------------


@pytest.fixture(scope="session")
def tok(tmp_path_factory):
    """A byte-level BPE tokenizer (vocab 1024) trained by the project, shared by the session."""
    from swefleet.agents.tokenizer import Tokenizer

    from swefleet.tinymodel import train_tokenizer

    path = tmp_path_factory.mktemp("tokenizer")
    train_tokenizer(path, vocab_size=1024)
    return Tokenizer.from_dir(path)


# --- inference: the tiny model, an embedded server on it, a fake `vllm` command ---------------


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """The tiny model (`inference.testing.tiny_checkpoint`), made once per session under
    `<basetemp>/inference-models` and shared by the modules that ask for it."""
    from swefleet.inference.testing import tiny_checkpoint

    return tiny_checkpoint(tmp_path_factory.getbasetemp() / "inference-models")


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory, request):
    """An embedded server on `model_dir` for a module's tests (one thread; batch size: the
    module's `SERVER_MAX_BATCH_SIZE`, else 8); its log in a folder named after the module."""
    from swefleet.inference.engine.settings import EngineSettings
    from swefleet.inference.launch import start_embedded_server

    batch = getattr(request.module, "SERVER_MAX_BATCH_SIZE", 8)
    log = tmp_path_factory.mktemp(request.module.__name__.rsplit(".", 1)[-1]) / "server.log"
    settings = EngineSettings(model_dir=model_dir, threads=1, max_batch_size=batch)
    with start_embedded_server(settings, log_path=log) as handle:
        yield handle


@pytest.fixture
def fake_vllm(tmp_path):
    """An executable `vllm` (in `tmp_path/bin`) that runs tests/fake_vllm.py."""
    import sys

    exe = tmp_path / "bin" / "vllm"
    exe.parent.mkdir(parents=True, exist_ok=True)
    script = Path(__file__).resolve().parent / "fake_vllm.py"
    exe.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{script}" "$@"\n')
    exe.chmod(0o755)
    return exe


# --- orchestrator: a toy `swefleet rl` config on the tiny model -------------------------------

TOY_RL_CONFIG = """name = "{name}"
environment = "token_target"
[toy]
n_tasks = 2
answer_tokens = 4
[model]
path = "{model_dir}"
[inference]
request_timeout_s = 60
{inference}
[trainer]
device = "cpu"
lr = 5e-3
[orchestrator]
groups_per_step = 2
max_off_policy_steps = 2
{orchestrator}
"""


@pytest.fixture
def toy_rl_config(tmp_path, model_dir):
    """`write(name, inference, orchestrator) -> Path`: `tmp_path/rl.toml`, a token_target run
    of `model_dir` on the CPU; `inference` and `orchestrator` are TOML lines added to those
    sections (`inference` may open subsections such as `[inference.vllm]`)."""

    def write(name: str, inference: str, orchestrator: str) -> Path:
        path = tmp_path / "rl.toml"
        path.write_text(TOY_RL_CONFIG.format(name=name, model_dir=model_dir, inference=inference,
                                             orchestrator=orchestrator))
        return path

    return write
