"""The capacity planner's predictions next to swefleet's own measurements of the same setup.

    python benchmarks/plan_vs_measured.py                 # one GPU: qwen3-0.6b, 4 x 8192, ~3 min
    python benchmarks/plan_vs_measured.py --device cpu    # tiny, 2 x 128: the plumbing, < 1 min

Defaults on CUDA: `--preset qwen3-0.6b --seq-len 8192 --batch 4 --ac none,selective,full`;
on CPU: `--preset tiny --seq-len 128 --batch 2 --ac none`. Dense presets only.

The setup is `--layout` (default `configs/layouts/qwen3_0.6b_1xh200.toml`: one GPU shared by the
trainer and the embedded engine) with the model replaced by the `--preset` shape
(`swefleet/tinymodel.py`), the workload by `--batch` samples of `--seq-len` tokens (1/8 prompt)
packed into one micro-batch, and the activation checkpointing by each `--ac` mode. Predictions
come from the planner's own code (`swefleet.app.plan.estimate.plan`); measurements from swefleet's
real code, each worker in its own process (clean peak memory; on CPU the engine runs in the
first trainer's process after its figures are taken):

- trainer (`trainer.main.build_trainer` + `trainer.step.train_step`, as `benchmarks/trainer.py`
  drives it): tokens/s over `--steps` steps after `--warmup`, peak `max_memory_allocated` and
  `max_memory_reserved`, the memory still allocated after a step (fp32 weights + AdamW state;
  grads are freed), then `trainer.export.export_hf` of the trained weights (time and bytes);
- embedded engine (`inference.engine`): the loaded weights' memory, the static KV cache it
  allocates for `gpu_memory_utilization` of the GPU with `max_num_seqs` slots (tokens and bytes
  per token), then the reload of the exported weights (`read_weights` + `apply_weights`);
- vLLM (`--vllm auto`: on CUDA when importable): its "GPU KV cache size: N tokens" log line,
  predicted with the planner's default `reserve_gib` (vLLM keeps activations and graphs).

On CPU the GPU figures are nominal (`CPU_OVERRIDES`: fp32, a 1 GiB "GPU"), memory is the
process's resident-set growth and the engine's KV budget rule (fraction x memory - weights) is
applied to the nominal memory: the CPU run checks the plumbing, not the planner. The table has
quantity, predicted, measured and measured/predicted; the last line printed is one JSON object
with every figure (`rows`, the raw measurements, the layout used).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# run as a script, this file's folder is sys.path[0] and `benchmarks/trainer.py` would shadow the
# `trainer` package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))

DEFAULT_LAYOUT = ROOT / "configs" / "layouts" / "qwen3_0.6b_1xh200.toml"
#: CPU stand-ins (nominal, for the plumbing): fp32 everywhere, a 1 GiB device.
CPU_OVERRIDES = {
    "gpu": {"name": "cpu (nominal)", "memory_gib": 1.0, "bf16_tflops": 0.5, "hbm_tb_s": 0.05},
    "inference": {"weight_bytes": 4, "kv_bytes": 4},
    "trainer": {"compute_bytes": 4, "logits_bytes": 4},
}
GIB = 2**30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


# --- the planner's side ------------------------------------------------------------------------

def layout_data(args, ac: str, facts: dict) -> dict:
    """The layout TOML with the preset's shape, this workload and `ac`; hardware facts of the
    measured device (total memory, bf16 peak) replace the GPU defaults where known."""
    import tomllib

    from swefleet.app.plan.from_config import shape_from_hf
    from swefleet.tinymodel import PRESETS

    data = tomllib.loads(Path(args.layout).read_text())
    preset = PRESETS[args.preset]
    data["model"] = shape_from_hf(dict(preset), args.preset)
    prompt = max(1, args.seq_len // 8)
    data.setdefault("workload", {}).update(
        seq_len=args.seq_len, rollouts_per_step=args.batch, prompt_tokens=prompt,
        completion_tokens=args.seq_len - prompt,
        weight_sync_bytes=DTYPE_BYTES[preset.get("save_dtype", "float32")])  # export's dtype
    data.setdefault("trainer", {}).update(micro_batch_tokens=args.seq_len * args.batch,
                                          activation_checkpointing=ac)
    if args.device == "cpu":
        for section, values in CPU_OVERRIDES.items():
            data.setdefault(section, {}).update(values)
    else:
        gpu = data.setdefault("gpu", {})
        gpu.update(name=facts["device_name"], memory_gib=facts["total_mem_gib"])
        if facts.get("peak_tflops"):
            gpu["bf16_tflops"] = facts["peak_tflops"]
    return data


def predict(data: dict) -> dict:
    from swefleet.app.plan.estimate import plan
    from swefleet.app.plan.layout import validate_layout

    return plan(validate_layout(data, "plan_vs_measured layout"))


# --- measurement workers (one process each) ----------------------------------------------------

def make_checkpoint(preset: str, out: Path) -> Path:
    """Random-init Qwen3 of the preset, saved as `create_tiny_model` saves it (no tokenizer)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from swefleet.tinymodel import PRESETS

    shape = dict(PRESETS[preset])
    dtype = shape.pop("save_dtype", "float32")
    config = Qwen3Config(**shape, max_position_embeddings=131072, rope_theta=1_000_000.0,
                         tie_word_embeddings=False, eos_token_id=2, pad_token_id=0,
                         bos_token_id=None, torch_dtype=dtype)
    torch.manual_seed(0)
    Qwen3ForCausalLM(config).to(getattr(torch, dtype)).save_pretrained(out,
                                                                       safe_serialization=True)
    return out


def _rss_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _peak_rss_bytes() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _device_facts(device: str) -> dict:
    import torch

    if device != "cuda":
        return {"device_name": "cpu"}
    from swefleet.trainer.flops import peak_flops

    name = torch.cuda.get_device_name()
    peak = peak_flops(name)
    return {"device_name": name, "total_mem_gib": torch.cuda.mem_get_info()[1] / GIB,
            "peak_tflops": peak / 1e12 if peak else None}


def worker_trainer(spec: dict) -> dict:
    """Build the trainer as `trainer.main` does, time steps, then export the weights."""
    import torch
    from swefleet.trainer.config import TrainerConfig
    from swefleet.trainer.export import export_hf
    from swefleet.trainer.main import build_trainer, resolve_runtime
    from swefleet.trainer.step import train_step

    from benchmarks.trainer import time_steps
    from swefleet.batch import read_batch

    cuda = spec["device"] == "cuda"
    if not (Path(spec["ckpt"]) / "config.json").exists():
        make_checkpoint(spec["preset"], Path(spec["ckpt"]))
    arrays, _ = read_batch(spec["batch_file"])
    cfg = TrainerConfig(lr=1e-5, device=spec["device"],
                        compute_dtype="bfloat16" if cuda else "float32",
                        activation_checkpointing=spec["ac"], compile=spec["compile"],
                        micro_batch_tokens=len(arrays["tokens"]))
    device, attention = resolve_runtime(cfg)
    rss0 = _rss_bytes()
    policy, optimizer = build_trainer(cfg, Path(spec["ckpt"]), device, attention, 1)
    timed = time_steps(lambda: train_step(policy, optimizer, arrays, cfg)["loss"], device,
                       spec["warmup"], spec["steps"])
    out = {"ac": spec["ac"], "attention": attention, "tokens": len(arrays["tokens"]),
           "step_s": timed["step_s"], "step_s_all": timed["step_s_all"],
           "tokens_per_s": len(arrays["tokens"]) / timed["step_s"], **_device_facts(device)}
    if cuda:
        out.update(peak_mem_gib=timed["peak_mem_gib"], peak_reserved_gib=timed["peak_reserved_gib"],
                   state_gib=torch.cuda.memory_allocated() / GIB)
    else:
        out.update(peak_mem_gib=(_peak_rss_bytes() - rss0) / GIB, peak_reserved_gib=None,
                   state_gib=(_rss_bytes() - rss0) / GIB)
    if spec.get("export_dir"):
        t0 = time.perf_counter()
        path = export_hf(policy, spec["export_dir"], {"benchmark": "plan_vs_measured"})
        out["export_s"] = time.perf_counter() - t0
        out["export_bytes"] = sum(f.stat().st_size for f in path.glob("*.safetensors"))
    if spec.get("engine"):  # after the trainer's memory figures are taken
        del policy, optimizer
        out["engine"] = worker_engine(spec["engine"])
    return out


def _engine_kv(loaded, spec: dict, weight_bytes: int):
    """An engine with a static KV cache sized as the server sizes it: on CUDA by its own budget
    rule (`auto_capacity`); on CPU (no memory figure) by that rule on the nominal memory."""
    from swefleet.inference.engine.core import Engine
    from swefleet.inference.engine.static import bytes_per_token

    kv_capacity = 0
    if spec["device"] != "cuda":
        budget = spec["fraction"] * spec["memory_gib"] * GIB - weight_bytes
        fit = int(budget) // (spec["slots"] * bytes_per_token(loaded.model))
        kv_capacity = fit // 256 * 256 if fit >= 256 else fit
    return Engine(loaded.model, loaded.eos_ids, max_model_len=loaded.max_model_len,
                  max_batch_size=spec["slots"], kv_mode="static", kv_capacity=kv_capacity,
                  cuda_graphs=False, gpu_memory_fraction=spec["fraction"])


def worker_engine(spec: dict) -> dict:
    """Weights and static KV cache of the embedded engine; then the reload of new weights."""
    import torch
    from swefleet.inference.engine.model import load_model
    from swefleet.inference.engine.weights import apply_weights, read_weights

    cuda = spec["device"] == "cuda"
    loaded = load_model(spec["ckpt"], device=spec["device"])
    params = {id(p): p for p in loaded.model.parameters()}.values()
    weight_bytes = (torch.cuda.memory_allocated() if cuda
                    else sum(p.numel() * p.element_size() for p in params))
    engine = _engine_kv(loaded, spec, weight_bytes)
    cache = engine._kv.cache  # the tensors the static backend allocated
    kv_bytes = sum(t.numel() * t.element_size() for t in cache.keys + cache.values)
    kv_tokens = cache.slots * cache.capacity
    out = {"weights_gib": weight_bytes / GIB, "kv_slots": cache.slots,
           "kv_tokens_per_slot": cache.capacity, "kv_capacity_tokens": kv_tokens,
           "kv_bytes_per_token": kv_bytes / kv_tokens, "kv_gib": kv_bytes / GIB,
           **_device_facts(spec["device"])}
    if spec.get("exported"):
        t0 = time.perf_counter()
        apply_weights(loaded.model, read_weights(loaded.model, spec["exported"]))
        if cuda:
            torch.cuda.synchronize()
        out["reload_s"] = time.perf_counter() - t0
    return out


VLLM_CODE = ("import sys; from vllm import LLM; LLM(model=sys.argv[1], "
             "gpu_memory_utilization=float(sys.argv[2]), max_model_len=int(sys.argv[3]), "
             "max_num_seqs=int(sys.argv[4]), enforce_eager=True, skip_tokenizer_init=True)")


KV_LINE = re.compile(r"GPU KV cache size: ([\d,]+) tokens")


def measure_vllm(ckpt: Path, fraction: float, max_len: int, seqs: int, timeout_s: float) -> dict:
    """Start vLLM's offline engine on the checkpoint, read its KV-cache log line, stop it (its
    whole process group: the engine-core child too) as soon as the line is out."""
    import threading

    cmd = [sys.executable, "-c", VLLM_CODE, str(ckpt), str(fraction), str(max_len), str(seqs)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}  # a local directory: nothing to download
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, env=env)
    lines: list[str] = []
    done = threading.Event()

    def read() -> None:
        for line in proc.stdout:
            lines.append(line)
            if KV_LINE.search(line):
                done.set()
        done.set()

    threading.Thread(target=read, daemon=True).start()
    done.wait(timeout_s)
    _stop_group(proc)
    text = "".join(lines)
    found = KV_LINE.search(text)
    if not found:
        return {"error": text[-1500:] or f"no output within {timeout_s:.0f} s"}
    return {"kv_capacity_tokens": int(found.group(1).replace(",", ""))}


def _stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the process group, up to 10 s to exit, then SIGKILL to whatever is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
    proc.wait()


def run_worker(kind: str, spec: dict, timeout_s: float) -> dict:
    """One worker in its own process; its last stdout line is its JSON. A worker that fails or
    runs out of time gives {"error": its output's tail} (printed), the others still run."""
    cmd = [sys.executable, __file__, "--worker", kind, "--spec", json.dumps(spec)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s,
                              check=False)
    except subprocess.TimeoutExpired:
        return {"error": f"{kind} worker timed out after {timeout_s:.0f} s"}
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stdout + proc.stderr)[-3000:]
        print(f"{kind} worker failed (exit {proc.returncode}):\n{tail}", file=sys.stderr)
        return {"error": tail}
    return json.loads(lines[-1])


# --- the comparison ----------------------------------------------------------------------------

def _row(quantity: str, unit: str, predicted: float, measured: float, source: str) -> dict:
    return {"quantity": quantity, "unit": unit, "predicted": predicted, "measured": measured,
            "ratio": measured / predicted, "source": source}


def trainer_rows(ac: str, p: dict, m: dict, peak_name: str) -> list[dict]:
    tr = p["trainer"]
    rows = [
        _row(f"trainer tokens/s (ac={ac})", "tokens/s", tr["tokens_per_s"], m["tokens_per_s"],
             "trainer.tokens_per_s: FLOPs / (GPUs x peak x trainer.mfu)"),
        _row(f"trainer peak allocated (ac={ac})", "GiB", tr["mem_total_gib_per_gpu"],
             m["peak_mem_gib"], f"trainer.mem_total_gib_per_gpu vs {peak_name}"),
    ]
    if m.get("peak_reserved_gib"):
        rows.append(_row(f"trainer peak reserved (ac={ac})", "GiB", tr["mem_total_gib_per_gpu"],
                         m["peak_reserved_gib"], "trainer.mem_total_gib_per_gpu vs "
                         "max_memory_reserved"))
    return rows


def state_row(p: dict, m: dict) -> dict:
    tr = p["trainer"]
    return _row("trainer state after a step", "GiB",
                tr["mem_weights_gib_per_gpu"] + tr["mem_optimizer_gib_per_gpu"], m["state_gib"],
                "trainer.mem_weights + mem_optimizer (grads freed after the step)")


def engine_rows(p: dict, e: dict) -> list[dict]:
    inf = p["inference"]
    return [
        _row("engine weights", "GiB", inf["weights_gib_per_gpu"], e["weights_gib"],
             "inference.weights_gib_per_gpu"),
        _row("KV bytes per token", "B", inf["kv_bytes_per_token"], e["kv_bytes_per_token"],
             "inference.kv_bytes_per_token: L x 2 K d x b_kv"),
        _row("engine KV capacity", "tokens", inf["kv_capacity_tokens_per_server"],
             e["kv_capacity_tokens"], "inference.kv_capacity_tokens_per_server"),
    ]


def sync_rows(data: dict, p: dict, export: dict, e: dict) -> list[dict]:
    from swefleet.app.plan import formulas as f

    ws = p["weight_sync"]
    one_pass = f.transfer_seconds(ws["bytes"], data["cluster"].get("disk_gb_s", 2.0) * 1e9)
    return [
        _row("weight sync bytes", "B", ws["bytes"], export["export_bytes"],
             "weight_sync.bytes: P x weight_sync_bytes"),
        _row("weight export (write)", "s", one_pass, export["export_s"],
             "bytes / disk (half of weight_sync.filesystem_s)"),
        _row("engine reload (read + copy)", "s", one_pass, e["reload_s"],
             "bytes / disk (half of weight_sync.filesystem_s)"),
        _row("weight sync, filesystem", "s", ws["filesystem_s"],
             export["export_s"] + e["reload_s"], "weight_sync.filesystem_s: 2 x bytes / disk"),
    ]


def _fmt(v: float) -> str:
    if abs(v) >= 1e5:
        return f"{v:,.0f}"
    return f"{v:,.3f}" if abs(v) < 100 else f"{v:,.1f}"


def print_table(rows: list[dict]) -> None:
    print(f"{'quantity':40} {'unit':>9} {'predicted':>14} {'measured':>14} {'meas/pred':>9}")
    for r in rows:
        print(f"{r['quantity']:40} {r['unit']:>9} {_fmt(r['predicted']):>14} "
              f"{_fmt(r['measured']):>14} {r['ratio']:>9.3f}")


def measure(args, tmp: Path) -> dict:
    """Batch, then the trainer (one process per AC mode; the first writes the checkpoint and
    exports the trained weights), the embedded engine (loads the checkpoint, sizes its KV cache,
    reloads the export; on CPU in the first trainer's process, to spare an interpreter start)
    and maybe vLLM."""
    import tomllib

    from benchmarks.trainer import make_batch
    from swefleet.tinymodel import PRESETS

    ckpt = tmp / "model"  # the first trainer worker writes it (torch is not loaded here)
    batch = make_batch(tmp / "batch.npz", PRESETS[args.preset]["vocab_size"], args.seq_len,
                       args.batch)
    print(f"{args.preset}: batch of {args.batch} x {args.seq_len} tokens", flush=True)
    inf = tomllib.loads(Path(args.layout).read_text()).get("inference", {})
    fraction, slots = inf.get("gpu_memory_utilization", 0.9), inf.get("max_num_seqs", 256)
    engine_spec = {"ckpt": str(ckpt), "exported": str(tmp / "exported"), "device": args.device,
                   "fraction": fraction, "slots": slots,
                   "memory_gib": CPU_OVERRIDES["gpu"]["memory_gib"]}
    trainers, engine = {}, None
    for i, ac in enumerate(args.ac):
        spec = {"ckpt": str(ckpt), "batch_file": str(batch), "device": args.device, "ac": ac,
                "compile": args.compile, "warmup": args.warmup, "steps": args.steps,
                "preset": args.preset, "export_dir": str(tmp / "exported") if i == 0 else None}
        if i == 0 and args.device == "cpu":
            spec["engine"] = engine_spec
        trainers[ac] = run_worker("trainer", spec, args.worker_timeout_s)
        engine = trainers[ac].pop("engine", engine)
        print(f"  trainer ac={ac}: {json.dumps(trainers[ac])}", flush=True)
    if engine is None:
        engine = run_worker("engine", engine_spec, args.worker_timeout_s)
    print(f"  engine: {json.dumps(engine)}", flush=True)
    out = {"trainer": trainers, "engine": engine, "fraction": fraction, "slots": slots}
    if args.vllm == "yes" or (args.vllm == "auto" and args.device == "cuda" and _has_vllm()):
        out["vllm"] = measure_vllm(ckpt, fraction, args.seq_len, slots, args.vllm_timeout_s)
        print(f"  vllm: {json.dumps(out['vllm'])[:300]}", flush=True)
    return out


def _has_vllm() -> bool:
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def _facts(args, measured: dict) -> dict:
    """Device facts from the first worker that ran (the engine's, else a trainer's)."""
    ran = [measured["engine"], *measured["trainer"].values()]
    ok = [m for m in ran if "error" not in m and (args.device == "cpu" or "total_mem_gib" in m)]
    if not ok:
        raise RuntimeError("no worker ran: " + "; ".join(m["error"][-300:] for m in ran))
    return ok[0]


def compare(args, measured: dict) -> dict:
    """Plan each AC mode's layout and line up the measurements that exist against it (a failed
    worker's rows are left out; its error is in `measured`)."""
    facts = _facts(args, measured)
    rows, plans = [], {}
    first = args.ac[0]
    tr0, engine = measured["trainer"][first], measured["engine"]
    for ac in args.ac:
        plans[ac] = predict(layout_data(args, ac, facts))
        peak = "max_memory_allocated" if args.device == "cuda" else "peak RSS growth (cpu)"
        if "error" not in measured["trainer"][ac]:
            rows += trainer_rows(ac, plans[ac], measured["trainer"][ac], peak)
    base = layout_data(args, first, facts)
    if "error" not in tr0:
        rows.append(state_row(plans[first], tr0))
    if "error" not in engine:
        rows += engine_rows(plans[first], engine)
    if "export_s" in tr0 and "reload_s" in engine:
        rows += sync_rows(base, plans[first], tr0, engine)
    vllm = measured.get("vllm")
    if vllm and "kv_capacity_tokens" in vllm:
        from swefleet.app.plan.layout import InferenceRole

        default_reserve = InferenceRole.model_fields["reserve_gib"].default
        vdata = json.loads(json.dumps(base))
        vdata["inference"]["reserve_gib"] = default_reserve
        rows.append(_row("vLLM KV capacity", "tokens",
                         predict(vdata)["inference"]["kv_capacity_tokens_per_server"],
                         vllm["kv_capacity_tokens"],
                         f"inference.kv_capacity_tokens_per_server, reserve {default_reserve} GiB"))
    return {"rows": rows, "layout": base, "plans": plans, "device_name": facts["device_name"]}


def _flops_check(args, plan: dict) -> dict:
    """The planner's FLOPs a step next to `trainer.flops.step_flops` (the trainer's MFU count)."""
    from swefleet.trainer.flops import step_flops

    from swefleet.tinymodel import PRESETS

    tr = plan["trainer"]
    return {"planner_flops": tr["flops_matmul"] + tr["flops_attention"],
            "trainer_flops": step_flops(PRESETS[args.preset], [args.seq_len] * args.batch)}


def main_run(args) -> int:
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="swefleet-planvs-") as tmp:
        measured = measure(args, Path(tmp))
    result = compare(args, measured)
    first_plan = result["plans"][args.ac[0]]
    checks = _flops_check(args, first_plan)
    peak = result["layout"]["gpu"].get("bf16_tflops", 989.0) * 1e12
    ran = {ac: m for ac, m in measured["trainer"].items() if "error" not in m}
    for m in ran.values():  # the MFU that would make the tokens/s row exact
        m["implied_mfu"] = checks["planner_flops"] * m["tokens_per_s"] / (
            first_plan["trainer"]["tokens_per_step"] * peak)
    errors = {name: m["error"] for name, m in [*measured["trainer"].items(),
                                               ("engine", measured["engine"]),
                                               ("vllm", measured.get("vllm") or {})]
              if "error" in m}
    print_table(result["rows"])
    print(f"FLOPs a step: planner {checks['planner_flops']:.4e}, trainer.flops "
          f"{checks['trainer_flops']:.4e}; implied MFU "
          + ", ".join(f"ac={ac} {m['implied_mfu']:.3f}" for ac, m in ran.items()))
    for name, error in errors.items():
        print(f"FAILED {name}: {error.strip().splitlines()[-1][:200] if error.strip() else '?'}")
    print(json.dumps({"device": args.device, "device_name": result["device_name"],
                      "preset": args.preset, "seq_len": args.seq_len, "batch": args.batch,
                      "ac": args.ac, "rows": result["rows"], "checks": checks,
                      "errors": errors, "measured": measured, "layout": result["layout"],
                      "wall_s": time.perf_counter() - started}))
    return 1 if set(errors) - {"vllm"} else 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from swefleet.tinymodel import PRESETS

    dense = sorted(n for n, s in PRESETS.items() if "num_experts" not in s)
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", choices=["auto", "cuda", "cpu"], default="auto")
    p.add_argument("--preset", choices=dense, help="default: qwen3-0.6b (cuda), tiny (cpu)")
    p.add_argument("--seq-len", type=int, help="tokens a sample; default 8192 (cuda), 128 (cpu)")
    p.add_argument("--batch", type=int, help="samples a step; default 4 (cuda), 2 (cpu)")
    p.add_argument("--ac", help="comma list of AC modes; default none,selective,full (cuda), none (cpu)")
    p.add_argument("--layout", type=Path, default=DEFAULT_LAYOUT)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--compile", action="store_true", help="torch.compile the trainer's blocks")
    p.add_argument("--vllm", choices=["auto", "yes", "no"], default="auto",
                   help="also read vLLM's KV capacity (auto: on cuda when vllm imports)")
    p.add_argument("--vllm-timeout-s", type=float, default=120.0)
    p.add_argument("--worker-timeout-s", type=float, default=300.0)
    p.add_argument("--worker", choices=["trainer", "engine"], help=argparse.SUPPRESS)
    p.add_argument("--spec", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return args
    if args.device == "auto":
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    cuda = args.device == "cuda"
    args.preset = args.preset or ("qwen3-0.6b" if cuda else "tiny")
    args.seq_len = args.seq_len or (8192 if cuda else 128)
    args.batch = args.batch or (4 if cuda else 2)
    args.ac = (args.ac or ("none,selective,full" if cuda else "none")).split(",")
    if set(args.ac) - {"none", "selective", "full"} or len(set(args.ac)) != len(args.ac):
        p.error(f"--ac {','.join(args.ac)}: a comma list of distinct none, selective, full")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        work = worker_trainer if args.worker == "trainer" else worker_engine
        print(json.dumps(work(json.loads(args.spec))), flush=True)
        return 0
    return main_run(args)


if __name__ == "__main__":
    sys.exit(main())
