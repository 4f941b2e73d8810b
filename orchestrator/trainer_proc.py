"""The trainer process seen from the orchestrator: start, stop, health, and its step metrics."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from swefleet.procs import die_with_parent
from swefleet.rundir import RunDir, write_json_atomic

if TYPE_CHECKING:  # the `[trainer]` table of the run config
    from swefleet.trainer.config import TrainerConfig

log = logging.getLogger(__name__)


#: NVLink multicast (NVLS) off unless the environment says otherwise: on GPUs shared with
#: other jobs it can put the host's GPUs out of service
TRAINER_ENV_DEFAULTS = {
    "NCCL_NVLS_ENABLE": "0",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
    "NVSHMEM_DISABLE_NVLS": "1",
}


def trainer_command(cfg: TrainerConfig, job_path: Path, log_dir: Path) -> list[str]:
    """`python -m swefleet.trainer.main` for one rank; for several, torchrun (this interpreter's, on a
    loopback rendezvous) with one process per rank, each rank's output also kept in
    `log_dir/<run id>/attempt_0/<rank>/` and copied to the console with a `[defaultN]:` prefix;
    on several nodes (`cfg.nodes`), `cfg.launcher` + torchrun with a c10d rendezvous."""
    main = ["-m", "swefleet.trainer.main", "--config", str(job_path)]
    if cfg.nodes > 1:  # one torchrun per node, started by the launcher (`swefleet slurm`: srun)
        return [
            *cfg.launcher, sys.executable, "-m", "torch.distributed.run",
            f"--nnodes={cfg.nodes}", f"--nproc-per-node={cfg.ranks // cfg.nodes}",
            "--rdzv-backend=c10d", f"--rdzv-endpoint={cfg.rdzv_endpoint}", "--tee=3", *main,
        ]  # fmt: skip
    if cfg.ranks == 1:
        return [sys.executable, *main]
    return [
        sys.executable, "-m", "torch.distributed.run", "--standalone",
        f"--nproc-per-node={cfg.ranks}", f"--log-dir={log_dir}", "--tee=3", *main,
    ]  # fmt: skip


def trainer_env(cfg: TrainerConfig, base: dict[str, str] | None = None) -> dict[str, str]:
    """The trainer's environment: `base` (default: this process's) with its GPUs made visible,
    NVLink multicast off and, for several ranks, the CPU threads split between them (each
    unless `base` sets it)."""
    env = {**TRAINER_ENV_DEFAULTS, **(os.environ if base is None else base)}
    if cfg.gpus:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, cfg.gpus))
    if cfg.ranks > 1 and "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(max(1, len(os.sched_getaffinity(0)) // cfg.ranks))
    return env


def start_trainer(
    cfg: TrainerConfig, steps: int, run_dir: RunDir, model_dir: Path,
    weight_sync: dict | None = None,
) -> subprocess.Popen:
    """The trainer is its own process (`trainer.ranks` > 1: torchrun and its ranks); it reads
    batches and publishes weights (atomic files). The job is the same for a fresh and a resumed
    run: the trainer resumes itself from its own checkpoints and the weights already published,
    up to version `steps`.
    Output goes to `logs/trainer.log`. The returned process (the trainer, or torchrun) leads its
    own process group, dies with this process, and torchrun's ranks die with torchrun.
    `weight_sync`: the job's broadcast section (`orchestrator.weight_sync.weight_sync_job`)."""
    job = {
        "model": str(model_dir), "batches_dir": str(run_dir.batches),
        "weights_dir": str(run_dir.weights), "start_version": 0,
        "max_steps": steps,
        **({"weight_sync": weight_sync} if weight_sync else {}),
    }
    job_path = run_dir.root / "trainer_job.json"
    write_json_atomic(job_path, {**job, "trainer": cfg.model_dump(mode="json")})
    cmd = trainer_command(cfg, job_path, run_dir.logs / "trainer_ranks")
    log_file = open(run_dir.logs / "trainer.log", "ab")  # noqa: SIM115 - owned by the process
    return TrainerProcess(
        cmd, lambda: run_dir.weights_path(steps).exists(),
        env=trainer_env(cfg), stdout=log_file, stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=die_with_parent,  # started from the main thread, before any fork
    )


class TrainerProcess(subprocess.Popen):
    """The trainer process (or torchrun), and `finished()`: it has published its last version
    and exits by itself (after saving its last checkpoint)."""

    def __init__(self, cmd: list[str], finished: Callable[[], bool], **kwargs: Any) -> None:
        super().__init__(cmd, **kwargs)
        self.finished = finished


INTERRUPTED_STOP_S = 2.0
"""How long the trainer of an interrupted (or failed) run may take to stop on SIGTERM before
SIGKILL: a step killed midway is lost, the checkpoints already written are whole (a resumed run
goes on from the newest)."""


def stop_trainer(proc: subprocess.Popen, timeout_s: float = 20.0) -> None:
    """Stop the trainer: its process group gets SIGTERM (torchrun passes it on to its ranks;
    each finishes its step), SIGKILL after `timeout_s` (torchrun's ranks die with it). A trainer
    that has `finished()` gets `timeout_s` to exit by itself first."""
    if proc.poll() is not None:
        return
    if getattr(proc, "finished", lambda: False)():
        try:
            proc.wait(timeout_s)
            return
        except subprocess.TimeoutExpired:
            pass
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
    tail = _log_tail(run_dir, 2000)
    return f"trainer process exited with code {code}; last log lines:\n{tail}"


def trainer_disk_pause(run_dir: RunDir) -> str | None:
    """The trainer's low-disk warning when its latest disk message says it is still waiting for
    room to write (`trainer/disk_guard.py`), else None: why no new version comes."""
    from swefleet.trainer.disk_guard import LOW_DISK, PAUSED, ROOM_AGAIN

    lines = [ln for ln in _log_tail(run_dir, 65536).splitlines()
             if LOW_DISK in ln or ROOM_AGAIN in ln]
    if lines and LOW_DISK in lines[-1] and PAUSED in lines[-1]:
        return lines[-1][lines[-1].index(LOW_DISK):]
    return None


def _log_tail(run_dir: RunDir, n_bytes: int) -> str:
    """The last `n_bytes` of `logs/trainer.log` ("" when there is none)."""
    log_path = run_dir.logs / "trainer.log"
    try:
        with open(log_path, "rb") as f:
            f.seek(max(0, log_path.stat().st_size - n_bytes))
            return f.read().decode(errors="replace")
    except FileNotFoundError:
        return ""


class TrainerMetricsTail:
    """The trainer's step records as `trainer/...` step metrics.

    Each call reports the latest trainer record (the trainer lags the orchestrator by up to
    `async_level` steps, so these are the newest *finished* optimizer step) and
    `trainer/idle_fraction`: waiting for a batch / (waiting + training + exporting) summed over
    the trainer steps that finished since the previous call (the previous value when none did).
    """

    def __init__(self, run_dir: RunDir) -> None:
        self.path = run_dir.trainer_metrics
        self.offset = 0
        """Bytes of the file already read (whole lines): each call reads only what is new."""
        self.last: dict | None = None
        self.idle_fraction: float | None = None

    def _read_new(self) -> list[dict]:
        """Records appended since the previous call (a line still being written waits)."""
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        whole = data[: data.rfind(b"\n") + 1]
        self.offset += len(whole)
        new = []
        for line in filter(bytes.strip, whole.split(b"\n")):
            try:
                new.append(json.loads(line))
            except ValueError:  # torn by a killed trainer: skipped, as `read_jsonl` does
                log.warning("%s: a line is not valid JSON; skipped", self.path)
        return new

    def __call__(self) -> dict:
        new = self._read_new()
        self.last = new[-1] if new else self.last
        if self.last is None:
            return {}
        wait = sum(r.get("wait_time_s", 0.0) for r in new)
        busy = sum(r.get("step_time_s", 0.0) + r.get("export_time_s", 0.0) for r in new)
        if wait + busy > 0:
            self.idle_fraction = wait / (wait + busy)
        out = {f"trainer/{k}": v for k, v in self.last.items()
               if isinstance(v, (int, float)) or k == "moe_load"}  # moe_load: [layers][experts]
        if self.idle_fraction is not None:
            out["trainer/idle_fraction"] = self.idle_fraction
        out["trainer/steps_since_last"] = len(new)
        return out
