"""The trainer process: wait for batch n, train one step, publish weights n+1, log metrics.

    python -m trainer.main --model DIR --batches-dir DIR --weights-dir DIR \
        [--start-version N] [--max-steps N] [--lr F] [--device cpu|cuda|auto] [--config FILE]

`--config` is a TOML/JSON `TrainerJob` (paths + a `[trainer]` table of `TrainerConfig`);
command-line flags override it. Step n reads `batches_dir/step_{n:06d}.npz` (n starts at
`start_version`), publishes `weights_dir/v{n+1:06d}/` (HF format, atomic rename) and appends one
JSON line to `weights_dir/../trainer_metrics.jsonl`.

Exit codes: 0 after `max_steps` steps or on SIGTERM/SIGINT (a step in progress is finished and
published first), 3 when no batch arrives within `batch_timeout_s`, 1 on any error.
"""

from __future__ import annotations

import argparse
import json
import logging
import resource
import signal
import sys
import threading
import time
from pathlib import Path

from swefleet.batch import batch_path, read_batch, weights_path
from trainer.config import TrainerConfig, TrainerJob, load_job_file

log = logging.getLogger("trainer")

EXIT_BATCH_TIMEOUT = 3


class BatchTimeout(Exception):
    """The next batch file did not appear in time."""


def parse_job(argv: list[str] | None) -> TrainerJob:
    p = argparse.ArgumentParser(prog="python -m trainer.main", description=__doc__.split("\n")[0])
    p.add_argument("--config", type=Path, help="TOML/JSON TrainerJob file")
    p.add_argument("--model", type=Path, help="HF checkpoint dir of version start_version")
    p.add_argument("--batches-dir", type=Path)
    p.add_argument("--weights-dir", type=Path)
    p.add_argument("--start-version", type=int)
    p.add_argument("--max-steps", type=int)
    p.add_argument("--lr", type=float)
    p.add_argument("--device", choices=["cpu", "cuda", "auto"])
    a = p.parse_args(argv)
    data = load_job_file(a.config) if a.config else {}
    for key in ("model", "batches_dir", "weights_dir", "start_version", "max_steps"):
        if getattr(a, key) is not None:
            data[key] = getattr(a, key)
    trainer = dict(data.get("trainer", {}))
    for key in ("lr", "device"):
        if getattr(a, key) is not None:
            trainer[key] = getattr(a, key)
    data["trainer"] = trainer
    return TrainerJob.model_validate(data)


class StopFlag:
    """Set by SIGTERM/SIGINT; the loop checks it between steps and while waiting."""

    def __init__(self) -> None:
        self.event = threading.Event()

    def install(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, _frame: object) -> None:
        log.info("received %s: stopping after the current step", signal.Signals(signum).name)
        self.event.set()


def wait_for_batch(path: Path, cfg: TrainerConfig, stop: StopFlag) -> bool:
    """True once `path` exists; False if stopped first; BatchTimeout after batch_timeout_s."""
    deadline = None if cfg.batch_timeout_s is None else time.monotonic() + cfg.batch_timeout_s
    while not path.exists():
        if deadline is not None and time.monotonic() > deadline:
            raise BatchTimeout(f"no {path} after {cfg.batch_timeout_s} s")
        if stop.event.wait(cfg.poll_interval_s):
            return False
    return True


def resolve_runtime(cfg: TrainerConfig) -> tuple[str, str]:
    """(device, attention) with `auto` resolved and combinations checked."""
    import torch

    device = cfg.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device='cuda' but CUDA is not available")
    attention = cfg.attention
    if attention == "auto":
        attention = "varlen" if device == "cuda" and cfg.compute_dtype == "bfloat16" else "sdpa"
    if attention == "varlen" and (device != "cuda" or cfg.compute_dtype != "bfloat16"):
        raise ValueError("attention='varlen' needs device='cuda' and compute_dtype='bfloat16'")
    return device, attention


def _memory_metrics(device: str) -> dict[str, float | None]:
    import torch

    rss_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    cuda = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None
    return {"peak_memory_gib": cuda, "peak_rss_gib": rss_gib}


def run(job: TrainerJob, stop: StopFlag) -> int:
    """The step loop. Returns the process exit code."""
    import torch

    from trainer.export import export_hf
    from trainer.step import build_optimizer, train_step
    from trainer.titan import load_policy

    cfg = job.trainer
    torch.manual_seed(cfg.seed)
    device, attention = resolve_runtime(cfg)
    policy = load_policy(job.model, torch.device(device), attention)
    optimizer = build_optimizer(policy, cfg)
    job.weights_dir.mkdir(parents=True, exist_ok=True)
    metrics_path = job.weights_dir.parent / "trainer_metrics.jsonl"
    log.info(
        "loaded %s on %s (%s attention); waiting for batches in %s",
        job.model,
        device,
        attention,
        job.batches_dir,
    )
    step, done = job.start_version, 0
    while not stop.event.is_set() and (job.max_steps is None or done < job.max_steps):
        path = batch_path(job.batches_dir, step)
        t_wait = time.monotonic()
        try:
            if not wait_for_batch(path, cfg, stop):
                break
        except BatchTimeout as e:
            log.error("%s", e)
            return EXIT_BATCH_TIMEOUT
        wait_s = time.monotonic() - t_wait
        arrays, meta = read_batch(path)
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        t0 = time.monotonic()
        metrics = train_step(policy, optimizer, arrays, cfg)
        if device == "cuda":
            torch.cuda.synchronize()
        step_s = time.monotonic() - t0
        out = export_hf(
            policy,
            weights_path(job.weights_dir, step + 1),
            {"version": step + 1, "step": step, "batch": str(path)},
        )
        versions = arrays["policy_version"]
        record = {
            "step": step,
            "policy_version": step + 1,
            "time": time.time(),
            **metrics,
            "tokens_per_s": metrics["n_tokens"] / step_s,
            "step_time_s": step_s,
            "export_time_s": time.monotonic() - t0 - step_s,
            "wait_time_s": wait_s,
            "sample_version_min": int(versions.min()),
            "sample_version_max": int(versions.max()),
            "max_staleness": int(step - versions.min()),
            "lr": cfg.lr,
            **_memory_metrics(device),
            "batch_meta": meta,
        }
        with metrics_path.open("a") as f:
            f.write(json.dumps(record) + "\n")
        log.info(
            "step %d -> %s loss=%.4g grad_norm=%.3g kl=%.2g %.1fs",
            step,
            out.name,
            metrics["loss"],
            metrics["grad_norm"],
            metrics["mismatch_kl"],
            step_s,
        )
        step, done = step + 1, done + 1
    return 0


def main(argv: list[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s trainer %(levelname)s %(message)s")
    job = parse_job(argv)
    stop = StopFlag()
    stop.install()
    return run(job, stop)


if __name__ == "__main__":
    sys.exit(main())
