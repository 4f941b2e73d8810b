"""Launch `python -m swefleet.trainer.main` as N ranks with the environment torchrun would give them
(loopback rendezvous), and read what a trainer run wrote. Shared by the FSDP / expert-parallel
tests on CPU (gloo) and GPU (nccl)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_trainer_ranks(config: Path, world: int = 2, module: str = "trainer.main",
                         **env_extra: str) -> list[subprocess.Popen]:
    """`world` processes of `python -m module --config config` (default: the trainer; stdout +
    stderr captured as text). NVLink multicast stays off unless the environment says otherwise."""
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
        cmd = [sys.executable, "-m", module, "--config", str(config)]
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


def rl_sample(rng: Any, n: int, vocab: int, *, prompt: int, mean_logp: float, i: int,
              version: int) -> dict:
    """One RL sample of `n` random tokens: the first `prompt` are prompt (not trained on), the
    server's logprobs scattered around `mean_logp`, advantage +1/-1 by the parity of `i`."""
    return {
        "tokens": rng.integers(3, vocab, n).tolist(),
        "loss_mask": [False] * prompt + [True] * (n - prompt),
        "inference_logprobs": [0.0] * prompt + (mean_logp + rng.normal(0, 0.3, n - prompt)).tolist(),
        "advantage": float(i % 2 * 2 - 1),
        "policy_version": version,
    }  # fmt: skip


def trainer_job(model: Path, batches: Path, run_dir: Path, max_steps: int, **trainer: Any) -> dict:
    """A `trainer.main` job on CPU (lr 3e-3, micro-batches of 24 tokens, lm_head chunks of 16,
    5 s batch timeout); `trainer` adds or overrides `TrainerConfig` fields."""
    return {
        "model": str(model),
        "batches_dir": str(batches),
        "weights_dir": str(run_dir / "weights"),
        "max_steps": max_steps,
        "trainer": {"device": "cpu", "lr": 3e-3, "micro_batch_tokens": 24,
                    "logprob_chunk_size": 16, "batch_timeout_s": 5, **trainer},
    }  # fmt: skip
