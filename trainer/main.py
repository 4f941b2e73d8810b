"""The trainer process: wait for batch n, train one step, publish weights n+1, log metrics.

    python -m swefleet.trainer.main --model DIR --batches-dir DIR --weights-dir DIR \
        [--start-version N] [--max-steps N] [--lr F] [--device cpu|cuda|auto] [--config FILE]

`--config` is a TOML/JSON `TrainerJob` (paths + a `[trainer]` table of `TrainerConfig`);
command-line flags override it. Step n reads `batches_dir/step_{n:06d}.npz` (n starts at
`start_version`), publishes `weights_dir/v{n+1:06d}/` (HF format, atomic rename) and appends one
JSON line to `weights_dir/../trainer_metrics.jsonl`.

Resume: with `checkpoint_every` set, a DCP checkpoint (model + optimizer + step) is saved every
that many steps (and when stopping), written in the background (`trainer/checkpoint_async.py`);
on start, `.tmp-` leftovers of a crash are removed from the weights and checkpoint directories
and the newest complete checkpoint is loaded, so the same command restarts a crashed job where
it left off (`trainer/checkpoint.py`); the learning-rate schedule goes on at that step
(`trainer/lr_schedule.py`). Low disk skips checkpoints and pauses exports
(`trainer/disk_guard.py`). Without a usable checkpoint the trainer continues from the newest
published version (weights only: the optimizer state starts afresh). A version that is already
published is never rewritten.

Several processes: under `torchrun --nproc-per-node N` (what `swefleet rl` starts for
`trainer.ranks = N`) the model is FSDP2-sharded over the N ranks (nccl on cuda, gloo on cpu);
each trains a share of every batch, rank 0 writes files (weights streamed one parameter at a
time into files of at most `export_shard_mb`: `trainer/export.py`). A rank dies with torchrun.
With `expert_parallel` E > 1 (Qwen3-MoE) the experts are split by expert over E of those ranks.

Exit codes: 0 after `max_steps` steps or on SIGTERM/SIGINT (a step in progress is finished and
published first), 3 when no batch arrives within `batch_timeout_s`, 1 on any error.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import resource
import signal
import sys
import threading
import time
from pathlib import Path

from swefleet.trainer.config import TrainerConfig, TrainerJob, load_job_file

from swefleet.batch import batch_path, read_batch, weights_path
from swefleet.filewatch import FileWatch

log = logging.getLogger("trainer")

EXIT_BATCH_TIMEOUT = 3


class BatchTimeout(Exception):
    """The next batch file did not appear in time."""


def parse_job(argv: list[str] | None) -> TrainerJob:
    p = argparse.ArgumentParser(prog="python -m swefleet.trainer.main", description=__doc__.split("\n")[0])
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
    """True once `path` exists; False if stopped first; BatchTimeout after batch_timeout_s.
    Woken by the batch's rename (inotify), by SIGTERM/SIGINT, or by the `batch_recheck_s`
    backstop (`swefleet.filewatch`)."""
    with FileWatch(cfg.batch_recheck_s) as watch:
        if watch.wait(path, cfg.batch_timeout_s, stop.event):
            return True
    if stop.event.is_set():
        return False
    raise BatchTimeout(f"no {path} after {cfg.batch_timeout_s} s")


def auto_attention(device: str, compute_dtype: str) -> str:
    """`auto` attention: cudnn on Hopper or newer (measured fastest there: docs/benchmarks.md),
    FA2 varlen on older GPUs, sdpa on CPU or in fp32."""
    import torch

    if device != "cuda" or compute_dtype != "bfloat16":
        return "sdpa"
    return "cudnn" if torch.cuda.get_device_capability() >= (9, 0) else "varlen"


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
        attention = auto_attention(device, cfg.compute_dtype)
    from swefleet.trainer.titan import PACKED_ATTENTIONS

    if attention in PACKED_ATTENTIONS and device != "cuda":
        raise ValueError(f"attention={attention!r} packs samples with a CUDA kernel: needs "
                         "device='cuda' (use 'sdpa' on CPU)")
    if attention in ("varlen", "cudnn") and cfg.compute_dtype != "bfloat16":
        raise ValueError(f"attention={attention!r} (fused GPU kernels) needs compute_dtype='bfloat16'")
    return device, attention


def _memory_metrics(device: str) -> dict[str, float | None]:
    import torch

    rss_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux
    cuda = torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None
    return {"peak_memory_gib": cuda, "peak_rss_gib": rss_gib}


def init_distributed(device: str) -> tuple[int, int]:
    """(rank, world size). Under torchrun (WORLD_SIZE > 1) start the process group (nccl on
    cuda, gloo on cpu) and pick this rank's GPU; otherwise (0, 1) and no group."""
    import os

    import torch
    import torch.distributed as dist

    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1
    if device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device == "cuda" else "gloo")
    return dist.get_rank(), world


def build_trainer(cfg: TrainerConfig, source: Path, device: str, attention: str, world: int):
    """(policy, optimizer) as configured, the weights from the HF directory `source`, sharded
    over `world` ranks (FSDP2 all-gathers bf16 weights when computing in bf16)."""
    import torch
    from swefleet.trainer.step import build_optimizer
    from swefleet.trainer.titan import load_policy

    torch_device = torch.device(device, torch.cuda.current_device()) if device == "cuda" else None
    policy = load_policy(
        source,
        torch_device or torch.device(device),
        attention,
        activation_checkpointing=cfg.activation_checkpointing,
        compile_blocks=cfg.compile,
        dp_size=world,
        fsdp_param_dtype=torch.bfloat16 if cfg.compute_dtype == "bfloat16" else torch.float32,
        float8=cfg.float8,
        float8_filter=cfg.float8_filter,
        float8_grad_fast_accum=cfg.float8_grad_fast_accum,
        float8_fsdp_all_gather=cfg.float8_fsdp_all_gather,
        expert_parallel=cfg.expert_parallel,
    )
    return policy, build_optimizer(policy, cfg)


def _mfu_fn(source: Path, device: str, world: int):
    """cu_seqlens, step seconds -> MFU of the step (None on CPU, unknown GPUs, MoE)."""
    import torch
    from swefleet.trainer.flops import step_mfu

    hf = json.loads((Path(source) / "config.json").read_text())
    name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    return lambda cu_seqlens, step_s: step_mfu(hf, cu_seqlens, step_s, name, world)


def _moe_timer(policy, cfg):
    """Per-layer MoE phase timing when `profile_moe` is on and the model has MoE layers."""
    if not cfg.profile_moe:
        return None
    from swefleet.trainer.moe_profile import MoEPhaseTimer

    timer = MoEPhaseTimer(policy.model)
    return timer if timer.layers else None


def clean_leftovers(job: TrainerJob, rank: int) -> None:
    """Remove what a crash left half-written (`.tmp-` entries) in the weights and checkpoint
    directories; nothing else writes there."""
    from swefleet.trainer.checkpoint import clean_partial
    from swefleet.trainer.config import checkpoint_dir

    if rank == 0:
        job.weights_dir.mkdir(parents=True, exist_ok=True)
        for d in (job.weights_dir, checkpoint_dir(job)):
            for p in clean_partial(d):
                log.warning("removed %s (left half-written by an earlier run)", p)
    _barrier()


def newest_published(weights_dir: Path) -> int | None:
    """The highest policy version published in `weights_dir` (complete directories only)."""
    import re

    versions = [
        int(p.name[1:])
        for p in weights_dir.iterdir()
        if p.is_dir() and re.fullmatch(r"v\d{6,}", p.name)
    ]
    return max(versions, default=None)


def resume_point(job: TrainerJob) -> tuple[Path | None, Path, int]:
    """(checkpoint to load or None, HF dir to build the model from, next batch index).
    Preference: the newest complete checkpoint at or after `start_version` (exact: weights and
    optimizer state; steps after it are re-trained); else the newest published version after
    `start_version` (weights only, fresh optimizer state); else the job's model."""
    from swefleet.trainer.checkpoint import latest_checkpoint
    from swefleet.trainer.config import checkpoint_dir

    latest = latest_checkpoint(checkpoint_dir(job))
    if latest is not None and latest[0] >= job.start_version:
        return latest[1], job.model, latest[0]
    published = newest_published(job.weights_dir)
    if published is not None and published > job.start_version:
        log.warning(
            "no checkpoint: continuing from published v%06d with a fresh optimizer state "
            "(set trainer.checkpoint_every to resume exactly)",
            published,
        )
        return None, weights_path(job.weights_dir, published), published
    return None, job.model, job.start_version


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _publish(job: TrainerJob, policy, step: int, path: Path, broadcaster, exporter) -> Path:
    """Export version step + 1 (with `exporter`: `trainer.export.Exporter`), unless it is
    already published (re-trained after a resume: the published version, which inference may
    already use, is never replaced). With `weight_sync` the version is broadcast instead (a
    marker announces it), except the ones the broadcaster also exports
    (`WeightBroadcaster.exports`)."""
    out = weights_path(job.weights_dir, step + 1)
    if out.exists():
        log.warning("%s is already published (re-trained after a resume); keeping it", out)
        return out
    if broadcaster is not None and not broadcaster.exports(step + 1):
        return broadcaster.publish(policy, step + 1)[0]
    meta = {"version": step + 1, "step": step, "batch": str(path)}
    out = exporter.export(policy, out, meta, shard_bytes=int(job.trainer.export_shard_mb * 2**20))
    if broadcaster is not None:
        broadcaster.announce_dir(step + 1, out)
    return out


def _export_on_stop(job: TrainerJob, policy, version: int, broadcaster, exporter) -> None:
    """Broadcast versions live only in the servers: write the last one as a directory too, so
    a resumed run (and its checkpoint, saved next) starts from it. Then wait until every
    published version is durable (`trainer/export.py`)."""
    out = weights_path(job.weights_dir, version)
    if broadcaster is not None and version > job.start_version and not out.exists():
        exporter.export(policy, out, {"version": version, "step": version - 1},
                        shard_bytes=int(job.trainer.export_shard_mb * 2**20))
    if broadcaster is not None:
        broadcaster.close()
    exporter.close()


def run(job: TrainerJob, stop: StopFlag) -> int:
    """The step loop. Returns the process exit code."""
    import torch
    from swefleet.trainer.step import train_step
    from swefleet.trainer.titan import expert_parallel_degree

    cfg = job.trainer
    torch.manual_seed(cfg.seed)
    device, attention = resolve_runtime(cfg)
    rank, world = init_distributed(device)
    clean_leftovers(job, rank)
    ckpt, source, step = resume_point(job)
    policy, optimizer = build_trainer(job.trainer, source, device, attention, world)
    moe_timer = _moe_timer(policy, cfg)
    mfu_of = _mfu_fn(source, device, world)
    if ckpt is not None:
        from swefleet.trainer.checkpoint import load_checkpoint

        load_checkpoint(policy, optimizer, ckpt)
        log.info("resumed from %s (policy version %d)", ckpt, step)
    from swefleet.trainer.lr_schedule import build_lr_scheduler

    scheduler = build_lr_scheduler(optimizer, cfg, job.max_steps, step - job.start_version)
    metrics_path = job.weights_dir.parent / "trainer_metrics.jsonl"
    end = None if job.max_steps is None else job.start_version + job.max_steps
    ep = expert_parallel_degree(policy.model)
    log.info(
        "loaded %s on %s x%d (%s attention%s); waiting for batches in %s from step %d",
        source,
        device,
        world,
        attention,
        f", expert parallel x{ep}" if ep > 1 else "",
        job.batches_dir,
        step,
    )
    from swefleet.trainer.weight_broadcast import WeightBroadcaster

    broadcaster = WeightBroadcaster.from_job(job, rank, newest_published(job.weights_dir) or 0)
    from swefleet.trainer.export import Exporter

    exporter = Exporter(cfg.export_durability, pinned=device == "cuda")
    from swefleet.trainer.saves import Saves

    saves = Saves(job, policy, world, device, step)  # checkpoints (off the step), disk checks
    saves.warm_early(policy, optimizer)  # host buffers pinned before the first batch arrives
    while not stop.event.is_set() and (end is None or step < end):
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
        metrics = train_step(policy, optimizer, arrays, cfg, held_version=step)
        scheduler.step()  # the learning rate of the next step
        if device == "cuda":
            torch.cuda.synchronize()
        step_s = time.monotonic() - t0
        metrics["mfu"] = mfu_of(arrays["cu_seqlens"], step_s)
        if moe_timer is not None:
            metrics.update(moe_timer.take())
        if not saves.room_to_publish(step + 1, broadcaster, stop.event):
            saves.abandon(exporter)  # stopped while the disk was full: step trained again later
            return 0
        out = _publish(job, policy, step, path, broadcaster, exporter)
        export_s = time.monotonic() - t0 - step_s
        saves.after_step(policy, optimizer, step, exporter)
        metrics.update(saves.metrics())
        if rank == 0:
            _log_step(
                metrics_path, step, arrays, meta, metrics, device, step_s, export_s, wait_s
            )
            log.info(
                "step %d -> %s loss=%.4g grad_norm=%.3g mismatch_kl=%s staleness_kl=%s %.1fs",
                step,
                out.name,
                metrics["loss"],
                metrics["grad_norm"],
                _short(metrics["mismatch_kl"]),
                _short(metrics["staleness_kl"]),
                step_s,
            )
        step += 1
    _export_on_stop(job, policy, step, broadcaster, exporter)
    saves.close(policy, optimizer, step, exporter)  # the progress since the last checkpoint
    return 0


def _short(x: float | None) -> str:
    """A KL for the log line; `-` when the step had no token of its kind."""
    return "-" if x is None else f"{x:.2g}"


def _log_step(
    metrics_path: Path,
    step: int,
    arrays: dict,
    meta: dict,
    metrics: dict,
    device: str,
    step_s: float,
    export_s: float,
    wait_s: float,
) -> None:
    versions = arrays["policy_version"]
    record = {
        "step": step,
        "policy_version": step + 1,
        "time": time.time(),
        **metrics,
        "tokens_per_s": metrics["n_tokens"] / step_s,
        "step_time_s": step_s,
        "export_time_s": export_s,
        "wait_time_s": wait_s,
        "sample_version_min": int(versions.min()),
        "sample_version_max": int(versions.max()),
        "max_staleness": int(step - versions.min()),
        **_memory_metrics(device),
        "batch_meta": meta,
    }
    from swefleet.rundir import append_jsonl

    append_jsonl(metrics_path, record)  # (ends a line torn by a killed trainer first)


def bind_to_torchrun() -> None:
    """A torchrun rank dies (SIGKILL) with its torchrun agent: a rank whose agent is gone
    could only hang in its next collective. torchrun itself stops its ranks on SIGTERM."""
    from swefleet.procs import die_with_parent

    if "TORCHELASTIC_RUN_ID" not in os.environ:
        return
    die_with_parent(signal.SIGKILL)
    if os.getppid() == 1:  # the agent died before the line above
        raise SystemExit("trainer rank: its torchrun agent is gone")


def main(argv: list[str] | None = None) -> int:
    bind_to_torchrun()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s trainer %(levelname)s %(message)s")
    job = parse_job(argv)
    stop = StopFlag()
    stop.install()
    code = run(job, stop)
    finish_distributed()
    return code


def finish_distributed() -> None:
    """Leave the process group after a finished run (torchrun ranks), before the interpreter
    exits: gloo's worker threads torn down at exit while the group still exists abort the
    process (SIGABRT) after the work is done. A failed run skips this: a rank waiting on a
    dead peer must not hang here."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    if "TORCHELASTIC_RUN_ID" in os.environ:  # a torchrun rank: its error in torchrun's report
        from torch.distributed.elastic.multiprocessing.errors import record

        sys.exit(record(main)())
    sys.exit(main())
