"""Weight export on the step path: the old publication (inline fsync, unpinned copies) next to
the new one (fsync in a background thread, pinned staging buffers reused), one model shape.

    python benchmarks/export.py                                  # CPU: `small` shape, 10 versions
    python benchmarks/export.py --preset qwen3-0.6b --device cuda --versions 20

The model is a random-init checkpoint of the `swefleet/tinymodel.py` preset (saved in the
preset's dtype under `--model`, default `.cache/bench-models/<preset>`), loaded as the trainer
loads it (`trainer.titan.load_policy`, fp32 master weights on `--device`). Each mode publishes
`--versions` versions after one untimed warm-up with `trainer.export.Exporter` into a fresh
directory under `--dir` (default: a temp dir in `runs/`, the filesystem real runs write to),
a simulated training step (`--step-s` of sleep, the weights nudged) between versions, keeping
the newest 2 versions on disk (a durable one is deleted, as retention does):

- `old`: `Exporter("inline", pinned=False)`: every file + the directory fsynced before the rename
  (the export before issue #15);
- `new`: `Exporter("background", pinned=True)`: renamed at once, fsynced by a worker thread that
  then writes the `.durable` marker; CUDA weights copied into reused pinned buffers.

Per mode: `export_s` (what the trainer's step waits for: median, p90, CV %), `version_s` (export +
step), and for `new` `durable_lag_s` (publish -> marker, median) and `drain_s` (the final wait).
The last line printed is one JSON object: `preset`, `device`, `gb`, `versions`, `step_s`, `old`,
`new`, `speedup` (old / new median export seconds).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))

from swefleet.tinymodel import PRESETS


def make_model(preset: str, out: Path) -> Path:
    """A random-init checkpoint of `preset` at `out` (kept: reused by the next run)."""
    marker = out / "bench_model.json"
    if marker.exists() and json.loads(marker.read_text()) == {"preset": preset}:
        return out
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    shape = dict(PRESETS[preset])
    dtype = shape.pop("save_dtype", "float32")
    if "num_experts" in shape or shape.get("model_type", "qwen3") != "qwen3":
        raise SystemExit(f"--preset {preset}: a dense Qwen3 preset please")
    torch.manual_seed(0)
    config = Qwen3Config(**shape, tie_word_embeddings=False, torch_dtype=dtype)
    Qwen3ForCausalLM(config).to(getattr(torch, dtype)).save_pretrained(out)
    marker.write_text(json.dumps({"preset": preset}))
    return out


def summary(xs: list[float]) -> dict:
    s = sorted(xs)
    mean = statistics.fmean(s)
    return {"median_s": statistics.median(s), "p90_s": s[int(0.9 * (len(s) - 1))],
            "mean_s": mean, "max_s": s[-1],
            "cv_pct": 100 * statistics.pstdev(s) / mean if mean else 0.0}


def run_mode(mode: str, policy, root: Path, versions: int, step_s: float, device: str) -> dict:
    import torch
    from swefleet.trainer.export import Exporter

    from swefleet.rundir import DURABLE_MARKER, is_durable

    exporter = Exporter("inline", pinned=False) if mode == "old" else Exporter("background")
    weights = root / mode
    export_s, version_s, lag_s, published = [], [], [], {}
    for v in range(versions + 1):  # v 0: warm-up (pinned buffers allocated, files created)
        t0 = time.monotonic()
        out = exporter.export(policy, weights / f"v{v + 1:06d}", {"version": v + 1})
        t1 = time.monotonic()
        published[out] = time.time()
        with torch.no_grad():  # the next training step
            for p in policy.model.parameters():
                p.add_(1e-3)
        if device == "cuda":
            torch.cuda.synchronize()
        time.sleep(step_s)
        if v:
            export_s.append(t1 - t0)
            version_s.append(time.monotonic() - t0)
        for old in sorted(published)[:-2]:  # retention (the orchestrator's, untimed)
            if is_durable(old):
                lag_s.append(json.loads((old / DURABLE_MARKER).read_text())["durable_at"]
                             - published.pop(old))
                shutil.rmtree(old)
    t0 = time.monotonic()
    exporter.close()
    drain_s = time.monotonic() - t0
    result = {"export_s": summary(export_s), "version_s": summary(version_s),
              "exports_s": [round(x, 4) for x in export_s]}
    if mode == "new":
        result |= {"durable_lag_s": statistics.median(lag_s) if lag_s else None,
                   "drain_s": drain_s}
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="small")
    p.add_argument("--versions", type=int, default=10, help="timed versions per mode")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--step-s", type=float, default=0.2, help="simulated training step between versions")  # fmt: skip
    p.add_argument("--model", type=Path, help="checkpoint dir (default: made from --preset)")
    p.add_argument("--dir", type=Path, default=ROOT / "runs", help="where the versions are written")  # fmt: skip
    p.add_argument("--modes", default="old,new", help="comma list, run in this order")
    a = p.parse_args(argv)
    import torch
    from swefleet.trainer.titan import load_policy

    model = a.model or make_model(a.preset, ROOT / ".cache" / "bench-models" / a.preset)
    policy = load_policy(model, torch.device(a.device), "sdpa")
    gb = sum(t.numel() for t in policy.model.state_dict().values()) * policy.source_dtype.itemsize / 1e9  # fmt: skip
    a.dir.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(dir=a.dir, prefix="bench-export-"))
    try:
        results = {m: run_mode(m, policy, root, a.versions, a.step_s, a.device)
                   for m in a.modes.split(",")}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    name = torch.cuda.get_device_name() if a.device == "cuda" else "cpu"
    print(f"{a.preset} ({gb:.2f} GB as {policy.source_dtype}) on {name}, {a.versions} versions "
          f"per mode, {a.step_s:g} s step between, in {a.dir}")
    print(f"{'mode':<5} {'export median':>14} {'p90':>8} {'CV %':>6} {'version median':>15}")
    for mode, r in results.items():
        e = r["export_s"]
        print(f"{mode:<5} {e['median_s']:>13.3f}s {e['p90_s']:>7.3f}s {e['cv_pct']:>6.1f} "
              f"{r['version_s']['median_s']:>14.3f}s")
    speedup = None
    if {"old", "new"} <= results.keys():
        speedup = results["old"]["export_s"]["median_s"] / results["new"]["export_s"]["median_s"]
        print(f"old / new median export: {speedup:.2f}x; new: durable "
              f"{results['new']['durable_lag_s'] or 0:.3f} s after publish (median), final drain "
              f"{results['new']['drain_s']:.3f} s")
    print(json.dumps({"preset": a.preset, "device": name, "gb": round(gb, 3),
                      "versions": a.versions, "step_s": a.step_s, **results,
                      "speedup": speedup}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
