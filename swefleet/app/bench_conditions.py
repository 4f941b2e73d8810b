"""The machine's state around one bench run: host load and, where `nvidia-smi` answers, each
GPU's SM and memory clocks, temperature and power. Recorded before and after every run in
`bench_env.json` (`run_conditions`), so that a run that was slower can be read against what
the machine was doing."""

from __future__ import annotations

import os
import shutil
import subprocess

GPU_FIELDS = ("clocks.sm", "clocks.mem", "temperature.gpu", "power.draw", "utilization.gpu")
GPU_KEYS = ("sm_clock_mhz", "mem_clock_mhz", "temperature_c", "power_w", "utilization_pct")


def gpu_state() -> list[dict]:
    """One dict per GPU (`GPU_KEYS`, numbers; None where the driver reports none); [] without
    `nvidia-smi`."""
    if not shutil.which("nvidia-smi"):
        return []
    proc = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}",
                           "--format=csv,noheader,nounits"],
                          check=False, capture_output=True, text=True, timeout=30)
    if proc.returncode != 0:
        return []
    return [parse_gpu_line(line) for line in proc.stdout.splitlines() if line.strip()]


def parse_gpu_line(line: str) -> dict:
    out = {}
    for key, raw in zip(GPU_KEYS, line.split(","), strict=False):
        try:
            out[key] = float(raw.strip())
        except ValueError:  # "[N/A]", "[Not Supported]"
            out[key] = None
    return out


def conditions() -> dict:
    """Load average (1, 5, 15 min), CPUs and the GPUs' state, now."""
    load = os.getloadavg()
    return {"loadavg": [round(x, 2) for x in load], "cpus": os.cpu_count(),
            "gpus": gpu_state()}
