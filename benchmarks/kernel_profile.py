"""Where a GPU step's time goes: one call of `step` under torch.profiler, its CUDA kernels
summed by kind (matmuls by precision, attention, compiled Triton kernels, optimizer, copies,
other) and the heaviest kernels by name. Used by `benchmarks/trainer.py` (variant option
`prof=1`)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

KINDS = (
    ("attention", ("flash", "fmha", "attention", "attn")),
    ("gemm_fp8", ("e4m3", "e5m2", "f8f8", "fp8", "float8")),
    ("gemm", ("gemm", "cutlass", "xmma", "nvjet", "cublas", "wgmma", "matmul", "_mm_")),
    ("optimizer", ("multi_tensor", "fused_adam", "adam")),
    ("nccl", ("nccl",)),
    ("triton", ("triton",)),
    ("copy", ("copy", "memcpy", "memset", "cat", "index", "gather", "scatter")),
)


def kernel_kind(name: str) -> str:
    """The kind of a CUDA kernel, from its name (first match in `KINDS`, else `other`)."""
    low = name.lower()
    for kind, needles in KINDS:
        if any(n in low for n in needles):
            return kind
    return "other"


def profile_step(step: Callable[[], object], top: int = 15) -> dict:
    """Run `step` once under the profiler; returns GPU ms by kind, the top kernels (ms, calls)
    and the step's wall ms (synchronised)."""
    import time

    import torch
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        step()
        torch.cuda.synchronize()
    wall_ms = (time.perf_counter() - t0) * 1e3
    by_kind: dict[str, float] = defaultdict(float)
    by_name: dict[str, list] = defaultdict(lambda: [0.0, 0])
    for event in prof.events():
        if event.device_type != torch.autograd.DeviceType.CUDA:
            continue
        ms = event.time_range.elapsed_us() / 1e3
        by_kind[kernel_kind(event.name)] += ms
        entry = by_name[event.name[:120]]
        entry[0] += ms
        entry[1] += 1
    heaviest = sorted(by_name.items(), key=lambda kv: -kv[1][0])[:top]
    return {
        "wall_ms": round(wall_ms, 2),
        "gpu_ms": round(sum(by_kind.values()), 2),
        "by_kind_ms": {k: round(v, 2) for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1])},
        "top_kernels": [
            {"name": name, "ms": round(ms, 2), "calls": calls, "kind": kernel_kind(name)}
            for name, (ms, calls) in heaviest
        ],
    }
