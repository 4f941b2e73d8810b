"""The trainer process seen from the orchestrator: start, stop, health, and its step metrics."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from swefleet.config import RunConfig
from swefleet.procs import die_with_parent
from swefleet.rundir import RunDir, read_jsonl, write_json_atomic


def start_trainer(cfg: RunConfig, run_dir: RunDir, model_dir: Path) -> subprocess.Popen:
    """The trainer is its own process; it reads batches and publishes weights (atomic files).
    The job is the same for a fresh and a resumed run: the trainer resumes itself from its own
    checkpoints and the weights already published."""
    job = {
        "model": str(model_dir), "batches_dir": str(run_dir.batches),
        "weights_dir": str(run_dir.weights), "start_version": 0,
        "max_steps": cfg.orchestrator.steps,
    }
    job_path = run_dir.root / "trainer_job.json"
    write_json_atomic(job_path, {**job, "trainer": cfg.trainer.model_dump(mode="json")})
    log_file = open(run_dir.logs / "trainer.log", "ab")  # noqa: SIM115 - owned by the process
    return subprocess.Popen(
        [sys.executable, "-m", "trainer.main", "--config", str(job_path)],
        stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
        preexec_fn=die_with_parent,  # noqa: PLW1509 - started from the main thread, before any fork
    )


def stop_trainer(proc: subprocess.Popen, timeout_s: float = 20.0) -> None:
    if proc.poll() is not None:
        return
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def trainer_problem(proc: subprocess.Popen, run_dir: RunDir) -> str | None:
    """Why the trainer can publish no more weights: it exited, whatever the code (it also exits
    0 on SIGTERM). The loop asks only while it still waits for a version."""
    code = proc.poll()
    if code is None:
        return None
    log_path = run_dir.logs / "trainer.log"
    tail = log_path.read_text(errors="replace")[-2000:] if log_path.exists() else ""
    return f"trainer process exited with code {code}; last log lines:\n{tail}"


class TrainerMetricsTail:
    """The trainer's step records as `trainer/...` step metrics.

    Each call reports the latest trainer record (the trainer lags the orchestrator by up to
    `async_level` steps, so these are the newest *finished* optimizer step) and
    `trainer/idle_fraction`: waiting for a batch / (waiting + training + exporting) summed over
    the trainer steps that finished since the previous call (the previous value when none did).
    """

    def __init__(self, run_dir: RunDir) -> None:
        self.path = run_dir.trainer_metrics
        self.seen = 0
        self.idle_fraction: float | None = None

    def __call__(self) -> dict:
        records = read_jsonl(self.path)
        if not records:
            return {}
        new, self.seen = records[self.seen:], len(records)
        wait = sum(r.get("wait_time_s", 0.0) for r in new)
        busy = sum(r.get("step_time_s", 0.0) + r.get("export_time_s", 0.0) for r in new)
        if wait + busy > 0:
            self.idle_fraction = wait / (wait + busy)
        last = records[-1]
        out = {f"trainer/{k}": v for k, v in last.items()
               if isinstance(v, (int, float)) or k == "moe_load"}  # moe_load: [layers][experts]
        if self.idle_fraction is not None:
            out["trainer/idle_fraction"] = self.idle_fraction
        out["trainer/steps_since_last"] = len(new)
        return out
