"""`swefleet slurm` on a real Slurm: the three-node cluster of `scripts/ensure-slurm.sh` on this
machine (munge, slurmctld, one slurmd per node). A short CPU run goes through one batch job to
the end: the orchestrator on node 0, a two-node trainer (torchrun --nnodes=2 through srun) on
nodes 0-1, its inference server an `srun` step on node 2; a cancelled Docker job (scancel)
leaves no process and no sandbox container of its run."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
NO_PACKAGES = 3  # exit code of ensure-slurm.sh when apt-get cannot install Slurm/munge


@pytest.fixture(scope="module")
def slurm_env() -> dict[str, str]:
    """The environment of Slurm clients (SLURM_CONF) once the test cluster is up. The daemons
    stay up, idle, after the tests (a later call finds them running)."""
    done = subprocess.run(["bash", str(REPO / "scripts/ensure-slurm.sh")], capture_output=True,
                          text=True, timeout=600, check=False)  # fmt: skip
    if done.returncode == NO_PACKAGES:
        pytest.skip(f"Slurm packages cannot be installed here: {done.stderr.strip()[-300:]}")
    assert done.returncode == 0, done.stderr[-3000:]
    return {**os.environ, "SLURM_CONF": done.stdout.strip().splitlines()[-1]}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from swefleet.tinymodel import create_tiny_model

    return create_tiny_model(tmp_path_factory.getbasetemp() / "tiny-qwen3", seed=0)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _submit(env: dict, config: str, run: Path, *sets: str) -> str:
    cmd = [sys.executable, "-m", "swefleet", "slurm", "--config", str(REPO / config),
           "--output-dir", str(run), "--set", f"slurm.server_port={_free_port()}",
           "--set", f"slurm.rdzv_port={_free_port()}"]  # fmt: skip
    for s in sets:
        cmd += ["--set", s]
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=60,
                          check=False)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return re.search(r"submitted batch job (\d+)", done.stdout).group(1)


def _job(env: dict, job: str) -> dict[str, str]:
    out = subprocess.run(["scontrol", "-o", "show", "job", job], env=env, capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    return dict(f.split("=", 1) for f in out.split() if "=" in f)


def _in_queue(env: dict, job: str) -> bool:
    out = subprocess.run(["squeue", "-h", "-j", job], env=env, capture_output=True, text=True,
                         check=False).stdout  # fmt: skip
    return bool(out.strip())


def _wait_done(env: dict, job: str, timeout_s: float) -> dict[str, str]:
    """The job's record once it has left the queue (every process of it ended)."""
    deadline = time.monotonic() + timeout_s
    while _in_queue(env, job):
        if time.monotonic() > deadline:
            subprocess.run(["scancel", job], env=env, check=False)
            pytest.fail(f"job {job} still in the queue after {timeout_s}s: {_job(env, job)}")
        time.sleep(1)
    return _job(env, job)


def _processes_mentioning(*needles: str) -> dict[int, str]:
    """pid -> command line of every live process whose command line contains a needle."""
    found = {}
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            cmd = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if any(n in cmd for n in needles) and int(cmdline.parent.name) != os.getpid():
            found[int(cmdline.parent.name)] = cmd
    return found


def _run_containers(name: str) -> list[str]:
    out = subprocess.run(["docker", "ps", "-a", "--filter", "label=swefleet.run", "--format",
                          '{{.Names}} {{.Label "swefleet.run"}}'], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    return [line for line in out.splitlines() if line.split()[-1].startswith(f"{name}-")]


def _tail(path: Path) -> str:
    return f"--- {path.name}\n" + (path.read_text(errors="replace")[-3000:] if path.exists() else "")


def test_a_cpu_run_goes_through_one_batch_job(slurm_env, tiny, tmp_path):
    run = tmp_path / "run"
    job = _submit(slurm_env, "configs/slurm_cpu.toml", run, "orchestrator.steps=2",
                  f'model.path="{tiny}"')  # fmt: skip
    record = _wait_done(slurm_env, job, 240)
    logs = run / "logs"
    why = "\n".join(_tail(p) for p in sorted(logs.glob("*")))
    assert record["JobState"] == "COMPLETED" and record["ExitCode"] == "0:0", (record, why)

    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2, summary
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 2
    assert (run / "weights" / "v000002").is_dir()
    config = json.loads((run / "config.json").read_text())  # what `rl` ran: the server external
    assert config["inference"]["kind"] == "external", config["inference"]
    [url] = config["inference"]["servers"]
    assert list(summary["servers"]) == [url]

    assert "done, exit code 0" in (logs / f"slurm-{job}.out").read_text()
    assert "1 servers ready" in (logs / "head.log").read_text()
    server_log = (logs / "inference-0.log").read_text()
    assert "serving" in server_log and "on 127.0.0.1:" in server_log
    assert config["trainer"]["nodes"] == 2 and config["trainer"]["launcher"][0] == "srun"
    trainer_log = (logs / "trainer.log").read_text()
    assert "on cpu x2" in trainer_log, trainer_log[-3000:]
    for task in (0, 1):  # srun --label: one torchrun per trainer node
        assert f"{task}: [default0]:" in trainer_log, trainer_log[-3000:]
    assert _processes_mentioning(str(run), str(tiny)) == {}


def test_the_docker_quickstart_runs_to_the_end_on_one_node(slurm_env, tiny, tmp_path):
    """`configs/quickstart.toml` as it is (SWE episodes in Docker sandboxes, the embedded engine
    launched and supervised by `rl` on the same node) through a one-node job."""
    name = f"slurmquick{uuid.uuid4().hex[:6]}"
    run = tmp_path / "run"
    job = _submit(slurm_env, "configs/quickstart.toml", run, f'name="{name}"',
                  f'model.path="{tiny}"', "orchestrator.steps=2",
                  "orchestrator.groups_per_step=2", "orchestrator.rollouts_per_task=2")  # fmt: skip
    record = _wait_done(slurm_env, job, 300)
    why = "\n".join(_tail(p) for p in sorted((run / "logs").glob("*")))
    assert record["JobState"] == "COMPLETED" and record["ExitCode"] == "0:0", (record, why)
    assert record["NumNodes"] == "1", record
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 2 and summary["episodes"] >= 8, summary
    episodes = [json.loads(line) for line in (run / "episodes.jsonl").read_text().splitlines()]
    assert all(e["task_id"] for e in episodes) and len(episodes) == summary["episodes"]
    assert _processes_mentioning(str(run), str(tiny)) == {}
    assert _run_containers(name) == []


def test_scancel_stops_every_role_and_removes_the_containers(slurm_env, tiny, tmp_path):
    """The Docker quickstart through a two-node job, cancelled once its sandboxes run: the
    run gets SIGTERM, removes its containers and stops within Slurm's KillWait."""
    name = f"slurmcancel{uuid.uuid4().hex[:6]}"
    run = tmp_path / "run"
    job = _submit(slurm_env, "configs/quickstart.toml", run, f'name="{name}"',
                  "slurm.inference_nodes=1", 'slurm.server_host="127.0.0.1"',
                  "orchestrator.steps=50", f'model.path="{tiny}"')  # fmt: skip
    seen: dict[int, str] = {}
    deadline = time.monotonic() + 240
    try:
        while not _run_containers(name):
            seen.update(_processes_mentioning(str(run), str(tiny)))
            assert _in_queue(slurm_env, job), _tail(run / "logs/head.log")
            assert time.monotonic() < deadline, "no sandbox started: " + _tail(run / "logs/head.log")
            time.sleep(0.5)
        seen.update(_processes_mentioning(str(run), str(tiny)))
    finally:
        subprocess.run(["scancel", job], env=slurm_env, check=True)
    record = _wait_done(slurm_env, job, 120)

    assert record["JobState"] == "CANCELLED", record
    assert any("swefleet.app.slurm.roles" in c and " head " in c for c in seen.values()), seen
    assert any("inference.engine.server" in c for c in seen.values()), seen
    assert any("trainer.main" in c for c in seen.values()), seen
    assert _processes_mentioning(str(run), str(tiny)) == {}
    assert _run_containers(name) == []
    assert "interrupted" in (run / "logs/head.log").read_text(), _tail(run / "logs/head.log")
    script_log = (run / "logs" / f"slurm-{job}.out").read_text()
    assert "stopping the run" in script_log and "done, exit code 143" in script_log, script_log
