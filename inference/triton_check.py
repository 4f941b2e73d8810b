"""torch's Triton device check, answered without initialising CUDA.

    settle_triton_check()   # before importing torchao (or vLLM, which imports it)

torch's `has_triton()` (cached per process) reads the GPU's compute capability through CUDA, and
torchao calls it while it imports. In a process that must not initialise CUDA (one vLLM forks
its engine core from: vLLM falls back to spawn, "CUDA is initialized") the answer comes from
`nvidia-smi` instead, through the device-property cache torch keeps for its fork()ed compile
workers, which is emptied again afterwards.

Light module: stdlib at import; torch is imported by the call.
"""

from __future__ import annotations

import os
import subprocess
from types import SimpleNamespace


def _compute_capability_major() -> int | None:
    """Major compute capability of the first visible GPU, from `nvidia-smi` (no CUDA)."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    cmd = ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"]
    try:
        out = subprocess.run([*cmd, *(["-i", first] if first.isdigit() else [])],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        return int(out.split()[0].split(".")[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return None


def settle_triton_check() -> str:
    """Answer torch's `has_triton()` (cached per process) without initialising CUDA; returns
    what it did, for a log. Nothing is done without a visible GPU, with CUDA already
    initialised, or when `nvidia-smi` gives no answer (torch then answers as usual)."""
    try:
        import torch
        from torch._dynamo import device_interface
        from torch.utils._triton import has_triton
    except ImportError:
        return "no torch"
    props, devices = (device_interface.caching_worker_device_properties,
                      device_interface.caching_worker_current_devices)
    if torch.cuda.is_initialized() or not torch.cuda.is_available() or "cuda" in props:
        return "not needed"
    major = _compute_capability_major()
    if major is None:
        return "no nvidia-smi answer"
    props["cuda"], devices["cuda"] = [SimpleNamespace(major=major)], 0
    try:
        return f"has_triton={has_triton()} (compute capability {major}.x from nvidia-smi)"
    finally:
        props.pop("cuda", None)
        devices.pop("cuda", None)
