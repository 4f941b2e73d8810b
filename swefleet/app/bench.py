"""`swefleet bench`: run one config R times for N steps (`swefleet rl` subprocesses into
`DIR/run-<i>/`), then write `bench.json`, `bench.md` and plots recomputed from the run files.

Re-running the same command resumes: runs that served all N versions are kept, an incomplete
run directory is moved aside to `run-<i>.incomplete-<time>` and run again.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from swefleet.app.bench_conditions import GpuSampler, conditions
from swefleet.rundir import write_json_atomic

log = logging.getLogger(__name__)
RunOne = Callable[[list[str], Path], int]
"""Runs one `swefleet rl` command with its output to a log file; returns the exit code."""


class BenchRunFailed(RuntimeError):
    """One of the bench's RL runs exited with an error."""


def rl_command(config: Path, out_dir: Path, steps: int, sets: list[str]) -> list[str]:
    """The `swefleet rl` command of one run; `--steps` wins over a `--set orchestrator.steps`."""
    cmd = [sys.executable, "-m", "swefleet", "rl", "--config", str(config),
           "--output-dir", str(out_dir)]
    for item in [*sets, f"orchestrator.steps={steps}"]:
        cmd += ["--set", item]
    return cmd


def run_subprocess(cmd: list[str], log_path: Path) -> int:
    from swefleet.app.interrupt import signal_name

    with log_path.open("ab") as f:
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT)
        try:
            return proc.wait()
        except KeyboardInterrupt:  # let the run clean up (Ctrl-C reached it too; SIGTERM not)
            if signal_name() == "SIGTERM":
                proc.terminate()
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            raise


def run_bench(config: Path, steps: int, runs: int, out: Path, sets: list[str],
              run_one: RunOne | None = None) -> None:
    """Run the R runs that are not complete yet, one after another."""
    from swefleet.evals.bench_data import load_run

    if steps < 2 or runs < 1:
        raise ValueError(f"bench needs --steps >= 2 (step 0 is always warm-up) and --runs >= 1, "
                         f"got steps={steps} runs={runs}")
    run_one = run_one or run_subprocess
    out.mkdir(parents=True, exist_ok=True)
    env_file = out / "bench_env.json"
    kept = json.loads(env_file.read_text()).get("run_conditions", {}) if env_file.exists() else {}
    write_json_atomic(env_file, environment(config, steps, runs, sets) | {"run_conditions": kept})
    for i in range(runs):
        run_dir = out / f"run-{i}"
        if run_dir.exists():
            if _complete(run_dir, steps, load_run):
                log.info("bench: %s already complete, kept", run_dir)
                continue
            aside = out / f"run-{i}.incomplete-{time.strftime('%Y%m%d-%H%M%S')}"
            log.warning("bench: %s is incomplete, moved to %s", run_dir, aside)
            shutil.move(run_dir, aside)
        log_path = out / f"run-{i}.log"
        log.info("bench: run %d/%d -> %s (log %s)", i + 1, runs, run_dir, log_path)
        t0 = time.monotonic()
        before, sampler = conditions(), GpuSampler().start()
        code = run_one(rl_command(config, run_dir, steps, sets), log_path)
        _record_conditions(out / "bench_env.json", run_dir.name,
                           {"before": before, "during": {"gpus": sampler.stop()},
                            "after": conditions()})
        if code != 0:
            tail = log_path.read_text(errors="replace")[-3000:] if log_path.exists() else ""
            raise BenchRunFailed(f"run {i} exited with code {code}; log {log_path}:\n{tail}")
        log.info("bench: run %d done in %.1fs", i, time.monotonic() - t0)


def _record_conditions(env_file: Path, name: str, state: dict) -> None:
    """Add one run's machine state (before, during and after it) to `bench_env.json`."""
    env = json.loads(env_file.read_text())
    env.setdefault("run_conditions", {})[name] = state
    write_json_atomic(env_file, env)


def _complete(run_dir: Path, steps: int, load_run) -> bool:
    if not (run_dir / "config.json").exists():
        return False
    run = load_run(run_dir)
    return run.complete and run.expected_steps == steps


def environment(config: Path, steps: int, runs: int, sets: list[str]) -> dict:
    """What the bench ran on; stored as `bench_env.json` and copied into the report."""
    return {
        "config_file": str(config), "steps": steps, "runs": runs, "sets": sets,
        "started_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "host": platform.node(),
        "platform": platform.platform(), "python": platform.python_version(),
        "cpus": os.cpu_count(), "gpus": _gpus(),
    }


def _gpus() -> list[str]:
    if not shutil.which("nvidia-smi"):
        return []
    proc = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                          check=False, capture_output=True, text=True, timeout=30)
    return [line.strip() for line in proc.stdout.splitlines() if line.strip()]


def run_bench_cli(args: argparse.Namespace) -> int:
    out = Path(args.output_dir)
    try:
        run_bench(Path(args.config), args.steps, args.runs, out, args.set)
    except BenchRunFailed as e:
        log.error("%s\nfinished runs are kept; the same command resumes", e)
        return 1
    from swefleet.evals.bench_outputs import write_bench_outputs

    write_bench_outputs(out, plots=not args.no_plots)
    print((out / "bench.md").read_text())
    return 0
