"""`swefleet slurm --config X.toml [--nodes N] [--dry-run]`: write the job's config and batch
script into the run directory and submit it with sbatch (`--dry-run`: write the job and print
the script, submit nothing: `sbatch RUN/slurm/job.sbatch` submits it by hand)."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from swefleet.app.slurm.layout import check_layout, head_config
from swefleet.app.slurm.script import RUN_CONFIG, render_script

if TYPE_CHECKING:
    from swefleet.app.config import RunConfig

JOB_SCRIPT = "slurm/job.sbatch"
"""Where the batch script lives in the run directory."""


def slurm_cli(args: argparse.Namespace) -> int:
    """ValueError (one line, the CLI's exit 2) for a bad config, a layout that cannot work, no
    sbatch, or a refused submission; nothing is written before the job is known to be valid."""
    cfg = job_config(args.config, args.set, args.nodes, args.output_dir)
    run_dir = Path(cfg.output_dir)
    python = cfg.slurm.python or sys.executable
    script = render_script(cfg, run_dir, python, Path.cwd())
    if args.dry_run:
        path = write_job(cfg, script)
        print(script, end="")
        print(f"swefleet slurm: wrote {path} and {run_dir / RUN_CONFIG}; submit with: "
              f"sbatch {path}", file=sys.stderr)
        return 0
    sbatch = shutil.which("sbatch")
    if sbatch is None:
        raise ValueError("sbatch not found on PATH: run this on a Slurm login node "
                         "(or try --dry-run to write the job and see the batch script)")
    job_id = submit(sbatch, write_job(cfg, script))
    print(f"submitted batch job {job_id}: run {run_dir}, logs in {run_dir / 'logs'}")
    return 0


def job_config(path: str, overrides: list[str], nodes: int | None, output_dir: str) -> RunConfig:
    """The run config of the job: the run directory absolute, the starting model placed in it
    (every node reads the same one), `--nodes` applied, the layout checked."""
    from swefleet.app.config import check_model_path, load_config
    from swefleet.rundir import default_output_dir

    cfg = load_config(path, overrides, topology=False)
    slurm = cfg.slurm
    if nodes is not None:
        if nodes - slurm.inference_nodes < 1:
            raise ValueError(f"--nodes {nodes} leaves no trainer node "
                             f"(slurm.inference_nodes={slurm.inference_nodes})")
        slurm = slurm.model_copy(update={"trainer_nodes": nodes - slurm.inference_nodes})
    out = Path(output_dir or cfg.output_dir or default_output_dir(cfg.name)).resolve()
    check_model_path(cfg.model)
    model = cfg.model.model_copy(update={"path": cfg.model.path or str(out / "model"),
                                         "create": cfg.model.create or not cfg.model.path})
    cfg = cfg.model_copy(update={"output_dir": str(out), "model": model, "slurm": slurm})
    try:
        check_layout(cfg)
        head_config(cfg, [f"node{i}" for i in range(slurm.nodes)])
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from e
    return cfg


def write_job(cfg: RunConfig, script: str) -> Path:
    """Write what the job reads: `slurm/run_config.json`, `slurm/job.sbatch` and `logs/` (where
    Slurm writes the job's output); the script's path."""
    from swefleet.rundir import write_json_atomic

    run_dir = Path(cfg.output_dir)
    (run_dir / "logs").mkdir(parents=True, exist_ok=True)
    (run_dir / "slurm").mkdir(exist_ok=True)
    write_json_atomic(run_dir / RUN_CONFIG, cfg.model_dump(mode="json"))
    script_path = run_dir / JOB_SCRIPT
    script_path.write_text(script)
    return script_path


def submit(sbatch: str, script_path: Path) -> str:
    """sbatch the written job; its id (also in `slurm/job_id`)."""
    done = subprocess.run([sbatch, "--parsable", str(script_path)], capture_output=True,
                          text=True, check=False)  # fmt: skip
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines() or ["(no output)"]
        raise ValueError(f"sbatch refused the job: {lines[-1]}")
    job_id = done.stdout.strip().split(";")[0]
    (script_path.parent / "job_id").write_text(job_id + "\n")
    return job_id
