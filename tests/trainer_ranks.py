"""Launch `python -m trainer.main` as N ranks with the environment torchrun would give them
(loopback rendezvous), and read what a trainer run wrote. Shared by the FSDP / expert-parallel
tests on CPU (gloo) and GPU (nccl)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_trainer_ranks(config: Path, world: int = 2, **env_extra: str) -> list[subprocess.Popen]:
    """`world` trainer processes on `config` (stdout + stderr captured as text). NVLink
    multicast stays off unless the environment says otherwise."""
    port = free_port()
    procs = []
    for rank in range(world):
        env = {
            "NCCL_NVLS_ENABLE": "0",
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(port),
            "RANK": str(rank),
            "LOCAL_RANK": str(rank),
            "WORLD_SIZE": str(world),
            **env_extra,
        }
        cmd = [sys.executable, "-m", "trainer.main", "--config", str(config)]
        procs.append(
            subprocess.Popen(
                cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
        )
    return procs


def finish(procs: list[subprocess.Popen], timeout: float = 120) -> list[str]:
    """Wait for every rank; all must exit 0. Returns their outputs."""
    outs = [p.communicate(timeout=timeout)[0] for p in procs]
    assert [p.returncode for p in procs] == [0] * len(procs), "\n".join(o[-6000:] for o in outs)
    return outs


def trainer_records(run_dir: Path) -> dict[int, dict]:
    """trainer_metrics.jsonl of a run, by step."""
    lines = (Path(run_dir) / "trainer_metrics.jsonl").read_text().splitlines()
    return {r["step"]: r for r in map(json.loads, lines)}
