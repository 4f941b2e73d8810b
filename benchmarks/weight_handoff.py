"""The trainer -> server weight hand-off of a real run: files next to shared memory.

    python benchmarks/weight_handoff.py --config configs/gpu_bench.toml    # embedded engine
    python benchmarks/weight_handoff.py --config configs/gpu_vllm.toml     # vllm serve
    python benchmarks/weight_handoff.py --config configs/quickstart.toml --repeats 3   # CPU

Builds the config's model (its `[model]` preset, or `model.path`), loads it as the trainer does
(`trainer.titan.load_policy` on the trainer's device), starts the config's inference servers
(`ServerFleet`, as `swefleet rl` does) and then hands versions over, alternating:

- `filesystem`: the trainer's `Exporter` writes the version as an HF directory (background
  durability, pinned host buffers on CUDA: the step-path export of `trainer/main.py`), then
  `fleet.update_weights` makes every server load it;
- `shared_memory`: the trainer's `WeightSharer` copies the version into its shared buffer (CUDA
  IPC on a GPU, a shared-memory file on CPU) and announces it; `fleet.update_weights` makes every
  server copy it in (`swefleet/shared_weights.py`).

`export_s` is the trainer's part (what it spends on the step path), `sync_s` the servers' part
(the orchestrator's `time/weight_sync_s`), `handoff_s` their sum; medians over `--repeats`
after one warm-up each. At the end the same weights go both ways and a greedy answer of each is
compared (`identical`: logprobs equal). Last line: one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROMPT = [11, 42, 7, 300, 5, 99]
WAYS = ("filesystem", "shared_memory")


def model_dir_of(cfg, work: Path) -> Path:
    """The config's checkpoint, or its random-init preset built under `work`."""
    if cfg.model.path and (Path(cfg.model.path) / "config.json").exists():
        return Path(cfg.model.path)
    from swefleet.tinymodel import create_tiny_model

    return create_tiny_model(work / "model", preset=cfg.model.preset, seed=cfg.model.seed)


async def greedy(fleet) -> list[float]:
    done = await fleet.generate(PROMPT, max_tokens=8)  # temperature 0: set in main
    return done.logprobs


async def one_way(kind: str, version: int, policy, weights: Path, fleet, exporter, sharer):
    """Hand `version` over one way; returns (export_s, sync_s)."""
    t0 = time.perf_counter()
    if kind == "filesystem":
        path = exporter.export(policy, weights / f"v{version:06d}", {"version": version})
    else:
        path, _ = sharer.publish(policy, version)
    t1 = time.perf_counter()
    await fleet.update_weights(version, path)
    t2 = time.perf_counter()
    exporter.wait()  # its background fsync is off the step path: keep it out of the next timing
    return t1 - t0, t2 - t1


async def measure(cfg, model_dir: Path, work: Path, repeats: int) -> dict:
    import torch
    from swefleet.inference.fleet import FleetClient
    from swefleet.inference.fleet_launch import ServerFleet
    from swefleet.trainer.export import Exporter
    from swefleet.trainer.titan import load_policy
    from swefleet.trainer.weight_share import WeightSharer

    from swefleet.app.topology import resolve_topology

    device = torch.device("cuda", 0) if torch.cuda.is_available() else torch.device("cpu")
    policy = load_policy(model_dir, device, "sdpa")
    weights = work / "weights"
    weights.mkdir(parents=True)
    topo = resolve_topology(cfg)
    servers = ServerFleet(topo.kind, topo.servers, cfg.inference, work / "logs")
    exporter = Exporter("background", pinned=device.type == "cuda")
    sharer = WeightSharer(weights, rank=0, ack_timeout_s=600)
    times: dict[str, list[tuple[float, float]]] = {way: [] for way in WAYS}
    try:
        await servers.start(model_dir)
        async with FleetClient(servers.urls, cfg.inference) as fleet:
            version = 0
            for i in range(repeats + 1):
                for kind in WAYS:
                    version += 1
                    took = await one_way(kind, version, policy, weights, fleet, exporter, sharer)
                    if i:  # the first round warms both up
                        times[kind].append(took)
            answers = {}
            for kind in WAYS:  # the same weights both ways
                version += 1
                await one_way(kind, version, policy, weights, fleet, exporter, sharer)
                answers[kind] = await greedy(fleet)
    finally:
        sharer.close()
        exporter.close()
        await asyncio.to_thread(servers.stop)
    out = {"device": str(device), "server": topo.kind, "repeats": repeats}
    for kind, rows in times.items():
        export = statistics.median(r[0] for r in rows)
        sync = statistics.median(r[1] for r in rows)
        out[kind] = {"export_s": round(export, 4), "sync_s": round(sync, 4),
                     "handoff_s": round(statistics.median(sum(r) for r in rows), 4),
                     "handoff_max_s": round(max(sum(r) for r in rows), 4)}
    out["speedup"] = round(out["filesystem"]["handoff_s"] / out["shared_memory"]["handoff_s"], 2)
    out["identical"] = answers["filesystem"] == answers["shared_memory"]
    return out


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", type=Path, required=True)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--work-dir", type=Path, default=None, help="default: a temporary folder")
    a = p.parse_args(argv)
    from swefleet.app.config import load_config

    cfg = load_config(a.config, ["inference.temperature=0"])
    with tempfile.TemporaryDirectory(dir=a.work_dir) as tmp:
        work = Path(tmp)
        model_dir = model_dir_of(cfg, work)
        result = asyncio.run(measure(cfg, model_dir, work, a.repeats))
    result["config"] = str(a.config)
    for kind in WAYS:
        r = result[kind]
        print(f"{kind:14s} export {r['export_s']:.4f} s + sync {r['sync_s']:.4f} s = "
              f"{r['handoff_s']:.4f} s (max {r['handoff_max_s']:.4f} s)")
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
