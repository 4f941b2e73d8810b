"""torch's Triton device check and the GPU's compute capability, answered without initialising
CUDA.

    settle_triton_check()   # before importing torchao (or vLLM, which imports it)
    with capability_from_nvidia_smi():
        import vllm.entrypoints.cli.main   # torchao asks both while it imports

torch's `has_triton()` (cached per process) reads the GPU's compute capability through CUDA, and
torchao calls it while it imports; its `mx_formats` then asks
`torch.cuda.get_device_capability()` itself (`is_sm_at_least_100`), which initialises CUDA too.
In a process that must not initialise CUDA (one vLLM forks its engine core from: vLLM falls
back to spawn, "CUDA is initialized") the answers come from `nvidia-smi` instead: the Triton
check through the device-property cache torch keeps for its fork()ed compile workers, emptied
again afterwards; the capability through `get_device_capability`, replaced while imports run.

Light module: stdlib at import; torch is imported by the call.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace


def _compute_capability() -> tuple[int, int] | None:
    """(major, minor) compute capability of the first visible GPU, from `nvidia-smi` (no CUDA)."""
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    cmd = ["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"]
    try:
        out = subprocess.run([*cmd, *(["-i", first] if first.isdigit() else [])],
                             capture_output=True, text=True, timeout=30, check=True).stdout
        major, _, minor = out.split()[0].partition(".")
        return int(major), int(minor or 0)
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
    capability = _compute_capability()
    if capability is None:
        return "no nvidia-smi answer"
    major = capability[0]
    props["cuda"], devices["cuda"] = [SimpleNamespace(major=major)], 0
    try:
        return f"has_triton={has_triton()} (compute capability {major}.x from nvidia-smi)"
    finally:
        props.pop("cuda", None)
        devices.pop("cuda", None)


@contextmanager
def capability_from_nvidia_smi() -> Iterator[str]:
    """While open, `torch.cuda.get_device_capability()` asked for the current device before
    CUDA is initialised is answered from `nvidia-smi` (asked once, on the first such call);
    with CUDA initialised, for another device, or without an answer, torch answers. Yields
    what it did, for a log; torch's function is restored on exit."""
    try:
        import torch
    except ImportError:
        yield "no torch"
        return
    original, asked = torch.cuda.get_device_capability, []

    def answered(device=None):
        if device not in (None, 0, "cuda", "cuda:0") or torch.cuda.is_initialized():
            return original(device)
        if not asked:
            asked.append(_compute_capability())
        return asked[0] if asked[0] is not None else original(device)

    torch.cuda.get_device_capability = answered
    try:
        yield "get_device_capability from nvidia-smi"
    finally:
        torch.cuda.get_device_capability = original
