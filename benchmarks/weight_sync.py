"""Weight sync: filesystem (export + load) next to broadcast, for one model shape.

    python benchmarks/weight_sync.py                          # CPU: tiny Qwen3 shape, gloo
    python benchmarks/weight_sync.py --shape qwen3-0.6b       # CPU or GPUs
    python benchmarks/weight_sync.py --shape qwen3-8b --receivers 1   # 2 GPUs: NCCL

Random weights in the shape's HF naming (`benchmarks/shapes.py`, in `--dtype`) stand for the
trainer's; each receiver holds a copy it updates in place, as an inference server does:

- `filesystem`: the sender writes the weights as one safetensors file into `--dir` (a copy to
  the host first, fsynced: what `trainer/export.py` does), then one receiver reads it and copies
  it into its weights on its device (`inference/engine/weights.py`'s read + apply);
- `broadcast`: the sender and `--receivers` receivers (each its own process) form the
  weight-transfer group (`swefleet/broadcast.py`: gloo on CPU, NCCL on CUDA, one GPU per rank:
  receivers + 1 GPUs), then the sender broadcasts the weights packed into `--bucket-mb` buckets
  and every receiver copies them into its weights (the embedded engine's path).

Each is timed `--repeats` times after one warm-up (the group is formed once; `join_s` is its
formation). `gb` is the weights' size; `gb_per_s` = gb / seconds of one update (for the
filesystem: export + load). The last line printed is one JSON object: `shape`, `device`, `gb`,
`receivers`, `filesystem` {`export_s`, `load_s`, `update_s`, `gb_per_s`}, `broadcast`
{`join_s`, `update_s`, `gb_per_s`}, `speedup` (filesystem / broadcast update seconds).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))

from benchmarks.shapes import QWEN3_SHAPES


def hf_shapes(shape: dict) -> dict[str, tuple[int, ...]]:
    """HF parameter name -> shape of a Qwen3 of `shape` (built on `meta`: no memory)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    with torch.device("meta"):
        model = Qwen3ForCausalLM(Qwen3Config(**shape))
    return {n: tuple(p.shape) for n, p in model.named_parameters()}  # tied: listed once


def make_weights(shapes: dict, dtype, device, seed: int = 0) -> dict:
    import torch

    g = torch.Generator(device=device).manual_seed(seed)
    return {n: torch.randn(s, generator=g, device=device).to(dtype) for n, s in shapes.items()}


def sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def filesystem_update(weights: dict, target: dict, directory: Path) -> tuple[float, float]:
    """(export seconds, load seconds) of one update through a safetensors file."""
    from safetensors.torch import load_file, save_file

    device = next(iter(target.values())).device
    out = directory / "model.safetensors"
    t0 = time.perf_counter()
    save_file({n: t.to("cpu") for n, t in weights.items()}, str(out), {"format": "pt"})
    fd = os.open(out, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)
    t1 = time.perf_counter()
    for name, tensor in load_file(str(out), device="cpu").items():
        target[name].copy_(tensor)
    sync(device)
    t2 = time.perf_counter()
    out.unlink()
    return t1 - t0, t2 - t1


def _device(kind: str, rank: int):
    import torch

    return torch.device("cuda", rank) if kind == "cuda" else torch.device("cpu")


def broadcast_rank(rank: int, args: argparse.Namespace, group_json: str, queue) -> None:
    """One rank of the broadcast side: 0 sends `repeats + 1` updates, the others receive them
    into their weights; each puts (rank, join_s, [update seconds]) on `queue`."""
    import torch

    from swefleet.broadcast import open_group, receive_packed, send_packed
    from swefleet.weight_transfer import TransferGroup, UpdateInfo

    torch.set_num_threads(max(1, args.threads))
    device = _device(args.device, rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    group = TransferGroup.model_validate_json(group_json)
    dtype = getattr(torch, args.dtype)
    shapes = hf_shapes(QWEN3_SHAPES[args.shape])
    weights = make_weights(shapes, dtype, device, seed=rank)
    info = UpdateInfo(names=list(shapes), dtype_names=[args.dtype] * len(shapes),
                      shapes=[list(s) for s in shapes.values()],
                      packed_buffer_size_bytes=args.bucket_mb << 20)
    t0 = time.perf_counter()
    joined = open_group(group, rank, device)
    join_s = time.perf_counter() - t0
    times = []
    for _ in range(args.repeats + 1):
        t0 = time.perf_counter()
        if rank == 0:
            send_packed(joined, iter(weights.items()), info)
        else:
            receive_packed(joined, info, lambda name, t: weights[name].copy_(t))
        sync(device)
        times.append(time.perf_counter() - t0)
    queue.put((rank, join_s, times[1:]))


def run_broadcast(args: argparse.Namespace) -> dict:
    import torch.multiprocessing as mp
    from swefleet.orchestrator.weight_sync import free_port

    from swefleet.weight_transfer import TransferGroup

    world = 1 + args.receivers
    if args.device == "cuda":
        import torch

        if torch.cuda.device_count() < world:
            raise SystemExit(f"broadcast over NCCL needs one GPU per rank: {world} GPUs for "
                             f"{args.receivers} receiver(s), {torch.cuda.device_count()} visible")
    group = TransferGroup(master_address="127.0.0.1", master_port=free_port("127.0.0.1"),
                          world_size=world, backend="nccl" if args.device == "cuda" else "gloo",
                          timeout_s=600)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=broadcast_rank, args=(r, args, group.model_dump_json(), queue))
             for r in range(world)]
    for p in procs:
        p.start()
    results = {}
    for _ in procs:
        rank, join_s, times = queue.get(timeout=3600)
        results[rank] = (join_s, times)
    for p in procs:
        p.join()
        if p.exitcode:
            raise SystemExit(f"a broadcast rank exited with {p.exitcode}")
    # an update is done when the slowest receiver has its weights
    update_s = statistics.median(max(results[r][1][i] for r in results)
                                 for i in range(args.repeats))
    return {"join_s": max(j for j, _ in results.values()), "update_s": update_s}


def run_filesystem(args: argparse.Namespace) -> dict:
    import torch

    torch.set_num_threads(max(1, args.threads))
    dtype = getattr(torch, args.dtype)
    shapes = hf_shapes(QWEN3_SHAPES[args.shape])
    sender = make_weights(shapes, dtype, _device(args.device, 0), seed=0)
    other = 1 if args.device == "cuda" and torch.cuda.device_count() > 1 else 0
    target = make_weights(shapes, dtype, _device(args.device, other), seed=1)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        runs = [filesystem_update(sender, target, Path(tmp)) for _ in range(args.repeats + 1)][1:]
    export_s = statistics.median(r[0] for r in runs)
    load_s = statistics.median(r[1] for r in runs)
    return {"export_s": export_s, "load_s": load_s,
            "update_s": statistics.median(r[0] + r[1] for r in runs)}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", default="tiny", choices=sorted(QWEN3_SHAPES))
    p.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--receivers", type=int, default=1)
    p.add_argument("--bucket-mb", type=int, default=1024)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=2, help="torch CPU threads per process")
    p.add_argument("--dir", default=None, help="filesystem side: where to write (default: tmp)")
    args = p.parse_args(argv)
    import torch

    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    shapes = hf_shapes(QWEN3_SHAPES[args.shape])
    gb = sum(torch.Size(s).numel() for s in shapes.values()) * getattr(torch, args.dtype).itemsize
    gb /= 1e9
    fs = run_filesystem(args)
    bc = run_broadcast(args)
    for side in (fs, bc):
        side["gb_per_s"] = gb / side["update_s"]
    result = {"shape": args.shape, "device": args.device, "dtype": args.dtype, "gb": gb,
              "receivers": args.receivers, "bucket_mb": args.bucket_mb, "filesystem": fs,
              "broadcast": bc, "speedup": fs["update_s"] / bc["update_s"]}
    print(f"{args.shape} ({gb:.3f} GB {args.dtype}) on {args.device}: filesystem "
          f"{fs['update_s']:.3f}s ({fs['gb_per_s']:.2f} GB/s), broadcast to {args.receivers} "
          f"{bc['update_s']:.3f}s ({bc['gb_per_s']:.2f} GB/s)", flush=True)
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
