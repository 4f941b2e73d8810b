"""Shared pytest fixtures. Append new fixtures with a clearly named section; keep imports lazy."""

from __future__ import annotations

import os
import socket
import time

import pytest

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
    from envs.images import DEFAULT_BASE_IMAGE, ensure_task_image, image_exists
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
    from agents.tokenizer import Tokenizer
    from swefleet.tinymodel import train_tokenizer

    path = tmp_path_factory.mktemp("tokenizer")
    train_tokenizer(path, vocab_size=1024)
    return Tokenizer.from_dir(path)
