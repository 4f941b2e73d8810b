"""The machine's state around one bench run: host load and, where `nvidia-smi` answers, each
GPU's SM and memory clocks, temperature and power. Recorded before and after every run in
`bench_env.json` (`run_conditions`), so that a run that was slower can be read against what
the machine was doing; while the run goes, `GpuSampler` reads the GPUs every few seconds
(`during`: each GPU's median and lowest SM clock, highest temperature, median power), so a
clock that dropped in the middle of a run shows even when it had recovered by its end."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading

from swefleet.stats import median

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


class GpuSampler:
    """Reads `gpu_state()` every `interval_s` on a thread between `start()` and `stop()`;
    `stop()` returns the summary per GPU (empty without GPUs)."""

    def __init__(self, interval_s: float = 5.0, read=gpu_state):
        self.interval_s = interval_s
        self._read = read
        self._samples: list[list[dict]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="gpu-sampler", daemon=True)

    def start(self) -> GpuSampler:
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self._samples.append(self._read())
            except (OSError, subprocess.SubprocessError):  # a hung or vanished nvidia-smi
                pass
            self._stop.wait(self.interval_s)

    def stop(self) -> list[dict]:
        self._stop.set()
        self._thread.join(timeout=60)
        return summarize(self._samples)


def summarize(samples: list[list[dict]]) -> list[dict]:
    """Per GPU over the samples: median and lowest SM clock, highest temperature, median power
    and utilisation, and how many samples had the GPU."""
    out = []
    for i in range(max((len(s) for s in samples), default=0)):
        rows = [s[i] for s in samples if len(s) > i]

        def vals(key, rows=rows):
            return [r[key] for r in rows if r.get(key) is not None]

        clocks, temps, power, util = (vals("sm_clock_mhz"), vals("temperature_c"),
                                      vals("power_w"), vals("utilization_pct"))
        out.append({
            "samples": len(rows),
            "sm_clock_mhz_median": median(clocks) if clocks else None,
            "sm_clock_mhz_min": min(clocks) if clocks else None,
            "temperature_c_max": max(temps) if temps else None,
            "power_w_median": median(power) if power else None,
            "utilization_pct_median": median(util) if util else None,
        })
    return out
