"""RL trainer step throughput and MFU, side by side with Hugging Face transformers training the
same model on the same batch with the same optimizer.

    python benchmarks/trainer.py --preset tiny                                  # CPU, seconds
    python benchmarks/trainer.py --preset qwen3-1.7b --seq-len 8192 --batch 2    # one H200

Both sides start from one random-init HF checkpoint written to a temp dir (bf16 safetensors,
loaded as fp32 master weights), train on one packed batch of `batch` samples of `seq_len` tokens
(the first 1/8 of each sample is prompt, the rest is trained on) with the same DAPO loss
(`trainer.losses`), gradient clipping and AdamW (fused on CUDA), bf16 autocast on CUDA.

- `ours`: the swefleet trainer's real path: `trainer.titan.load_policy` (torchtitan Qwen3 +
  parallelize_fn) and `trainer.step.train_step` (varlen packing on CUDA, chunked fp32
  log-softmax lm_head, DAPO, clip, AdamW). Options per variant: `ac=none|selective|full`,
  `compile=0|1`, `mb=<micro-batch tokens>`, `chunk=<lm_head rows per chunk>`,
  `attn=varlen|cudnn|flex|sdpa` (packed: FlashAttention-2 varlen / long samples through cuDNN
  one by one, short runs through FA2 / FlexAttention; sdpa: one padded row per sample,
  torchtitan prefers cuDNN attention there), `fp8=tensorwise|rowwise|
  rowwise_with_gw_hp` with `fp8filter=auto|all` (torchao float8 linears) and `fp8acc=forward|all`
  (which float8 GEMMs use fast accumulation: torchao's default, the forward only, or all three)
  and `fp8ag=0|1` (under ranks=N: all-gather bf16 weights, or float8 ones), `head=bfloat16|
  float32` (lm_head matmul precision), `ranks=N` (N processes under torchrun, one GPU each, FSDP2 over
  all of them, each rank training its share of the batch; tokens/s counts the whole batch, MFU
  divides by N GPUs, peak memory is rank 0's), `autotune=1` (inductor's
  max-autotune GEMMs + coordinate-descent tuning in the compiled blocks), `prof=1` (after the timed steps, one more step under
  torch.profiler: GPU time by kernel kind and the heaviest kernels, `benchmarks.kernel_profile`).
- `hf`: `AutoModelForCausalLM` (sdpa attention), full logits -> fp32 log_softmax -> the same
  loss. Option `ckpt=1`: gradient checkpointing.

`--long 32768,65536,131072` (long-context mode): one sample of each length in turn (shortest
first) through one `ours` variant (`--long-variant`, default full activation checkpointing +
compile), in one process; reports tokens/s and peak memory per length and the longest that
trained without running out of memory (after an OOM with the bf16 lm_head it retries that
length once with `head=float32`, which keeps no [tokens, vocab] softmax).

Each variant runs `--warmup` steps (excluded: compile, allocator warm-up), then `--steps` timed
steps; the median step time gives tokens/s, the fastest and slowest timed steps its spread
(`step_s_min`, `step_s_max`). On CUDA each variant runs in its own process (clean peak-memory
numbers). MFU uses `trainer.flops.step_flops` (causal attention, lm_head counted;
documented there) against the GPU's bf16 dense peak; `titan_mfu` uses torchtitan's convention,
for comparison with the anchors in shared/notes/TRAINER.md. The last line printed is one JSON
object (the first `ours` variant and the first `hf` variant; all variants under `variants`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# run as a script, this file's folder is sys.path[0] and its name would shadow the `trainer` package
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))

from benchmarks.shapes import QWEN3_SHAPES

PRESETS = {n: QWEN3_SHAPES[n] for n in ("tiny", "qwen3-1.7b", "qwen3-4b", "qwen3-8b")}
DEFAULT_SIZES = {"tiny": (256, 2), "qwen3-1.7b": (8192, 2), "qwen3-4b": (8192, 1), "qwen3-8b": (8192, 2)}
CUDA_VARIANTS = (
    "ours:attn=cudnn:compile=1,hf,hf:ckpt=1,ours:compile=1,ours:attn=cudnn:compile=1:fp8=tensorwise"
)
CPU_VARIANTS = "ours,hf"
VARIANT_FIELDS = ("name", "tokens_per_s", "step_s", "step_s_min", "step_s_max", "mfu",
                  "peak_mem_gib", "error")  # fmt: skip


def make_checkpoint(
    shape: dict, out: Path, device: str, max_positions: int = 40960
) -> Path:
    """Random-init Qwen3 of `shape` (HF config fields) saved as bf16 HF safetensors (seeded)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    config = Qwen3Config(
        **shape,
        max_position_embeddings=max_positions,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        eos_token_id=2,
        pad_token_id=0,
        bos_token_id=None,
    )
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(config)
    model.to(torch.bfloat16).save_pretrained(out, safe_serialization=True)
    return out


def make_batch(path: Path, vocab: int, seq_len: int, batch: int) -> Path:
    """`batch` samples of `seq_len` random tokens, prompt = first 1/8, advantages +-1, the
    server's logprobs near a uniform model's (ratios near 1, as on-policy)."""
    import numpy as np

    from swefleet.batch import pack_samples, write_batch

    rng = np.random.default_rng(0)
    prompt = max(1, seq_len // 8)
    samples = []
    for i in range(batch):
        mask = [False] * prompt + [True] * (seq_len - prompt)
        logp = -np.log(vocab) + 0.01 * rng.standard_normal(seq_len)
        samples.append(
            {
                "tokens": rng.integers(3, vocab, seq_len).tolist(),
                "loss_mask": mask,
                "inference_logprobs": np.where(mask, logp, 0.0).tolist(),
                "advantage": 1.0 if i % 2 == 0 else -1.0,
                "policy_version": 0,
            }
        )
    return write_batch(path, pack_samples(samples), {"benchmark": True})


def parse_variant(text: str) -> dict:
    """'ours:ac=none:compile=1' -> {'kind': 'ours', 'ac': 'none', 'compile': '1', 'name': ...}"""
    kind, *opts = text.split(":")
    if kind not in ("ours", "hf"):
        raise ValueError(f"variant {text!r}: kind must be ours or hf")
    if kind == "hf" and any(o.startswith("ranks=") for o in opts):
        raise ValueError(f"variant {text!r}: ranks= is for `ours` variants only")
    spec = {"kind": kind, "name": text}
    for opt in opts:
        key, _, value = opt.partition("=")
        if key not in ("ac", "compile", "mb", "chunk", "ckpt", "attn", "fp8", "fp8filter", "fp8acc", "fp8ag", "head", "prof", "autotune", "ranks"):
            raise ValueError(f"variant {text!r}: unknown option {key!r}")
        spec[key] = value
    return spec


def _trainer_config(device: str, spec: dict, total_tokens: int):
    from swefleet.trainer.config import TrainerConfig

    cuda = device == "cuda"
    return TrainerConfig(
        lr=1e-5,
        device=device,
        compute_dtype="bfloat16" if cuda else "float32",
        attention=spec.get("attn", "varlen" if cuda else "sdpa"),
        activation_checkpointing=spec.get("ac", "none"),
        compile=spec.get("compile", "0") == "1",
        micro_batch_tokens=int(spec.get("mb", total_tokens)),
        logprob_chunk_size=int(spec.get("chunk", 4096 if cuda else 256)),
        float8=spec.get("fp8", "none"),
        float8_filter=spec.get("fp8filter", "auto"),
        float8_grad_fast_accum=spec.get("fp8acc", "forward") == "all",
        float8_fsdp_all_gather=spec.get("fp8ag", "0") == "1",
        lm_head_dtype=spec.get("head", "auto"),
    )


def _build_ours(ckpt: Path, device: str, spec: dict, total_tokens: int):
    """(policy, optimizer, cfg) of an `ours` variant, built as `trainer.main` builds it (under
    torchrun: sharded over WORLD_SIZE ranks)."""
    from swefleet.trainer.main import build_trainer

    cfg = _trainer_config(device, spec, total_tokens)
    if spec.get("autotune") == "1":  # inductor benchmarks GEMM templates (cuBLAS vs Triton)
        import torch._inductor.config as inductor

        inductor.max_autotune_gemm = True
        inductor.coordinate_descent_tuning = True
    world = int(os.environ.get("WORLD_SIZE", "1"))
    policy, optimizer = build_trainer(cfg, ckpt, device, cfg.attention, world)
    return policy, optimizer, cfg


def _ours(ckpt: Path, arrays: dict, device: str, spec: dict):
    from swefleet.trainer.step import train_step

    policy, optimizer, cfg = _build_ours(ckpt, device, spec, len(arrays["tokens"]))
    return lambda: train_step(policy, optimizer, arrays, cfg)["loss"]


def _hf(ckpt: Path, arrays: dict, device: str, spec: dict):
    import torch
    from swefleet.trainer.losses import policy_loss
    from transformers import AutoModelForCausalLM

    cfg = _trainer_config(device, spec, len(arrays["tokens"]))
    model = AutoModelForCausalLM.from_pretrained(
        ckpt, dtype=torch.float32, attn_implementation="sdpa"
    ).to(device)
    if spec.get("ckpt", "0") == "1":
        model.gradient_checkpointing_enable()
    model.config.use_cache = False
    optimizer = torch.optim.AdamW(
        model.parameters(), lr=cfg.lr, betas=cfg.betas, weight_decay=cfg.weight_decay,
        fused=device == "cuda",
    )  # fmt: skip
    lengths = {int(n) for n in (arrays["cu_seqlens"][1:] - arrays["cu_seqlens"][:-1])}
    if len(lengths) != 1:
        raise ValueError("the hf variant needs samples of one length (one row each)")
    rows = len(arrays["cu_seqlens"]) - 1

    def tensor(key, dtype):
        return torch.from_numpy(arrays[key]).to(device=device, dtype=dtype).view(rows, -1)

    tokens, mask = tensor("tokens", torch.long), tensor("loss_mask", torch.bool)
    logp_inf, adv = tensor("inference_logprobs", torch.float32), tensor("advantages", torch.float32)
    n_trained = int(mask.sum())
    autocast = torch.bfloat16 if cfg.compute_dtype == "bfloat16" else None

    def step() -> float:
        model.train()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=autocast, enabled=autocast is not None):
            logits = model(input_ids=tokens).logits
        logp_all = torch.log_softmax(logits.float(), dim=-1)[:, :-1]
        logp = logp_all.gather(-1, tokens[:, 1:, None]).squeeze(-1)
        m = mask[:, 1:]
        loss, _ = policy_loss(
            cfg.loss, logp[m], logp_inf[:, 1:][m], adv[:, 1:][m], torch.ones_like(logp[m], dtype=torch.bool),
            eps_low=cfg.eps_low, eps_high=cfg.eps_high, tis_cap=cfg.tis_cap, n_tokens=n_trained,
        )  # fmt: skip
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.max_grad_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())

    return step


def time_steps(step, device: str, warmup: int, steps: int) -> dict:
    """Run `step` warmup + steps times; median time of the timed ones, losses, peak memory."""
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    times, losses = [], []
    for _ in range(warmup + steps):
        t0 = time.perf_counter()
        losses.append(step())
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    timed = times[warmup:]
    result = {
        "step_s": statistics.median(timed),
        "step_s_min": min(timed),
        "step_s_max": max(timed),
        "step_s_all": [round(t, 4) for t in times],
        "first_step_s": times[0],
        "losses": losses,
    }
    if device == "cuda":
        result["peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2**30
        result["peak_reserved_gib"] = torch.cuda.max_memory_reserved() / 2**30
    return result


def _sample_lengths(arrays: dict) -> list[int]:
    return [int(n) for n in arrays["cu_seqlens"][1:] - arrays["cu_seqlens"][:-1]]


def run_variant(ckpt: Path, batch_file: Path, device: str, spec: dict, warmup: int, steps: int):
    """Build one variant, run warmup + timed steps; returns its measurements."""
    from swefleet.batch import read_batch

    arrays, _ = read_batch(batch_file)
    t_build = time.perf_counter()
    step = (_ours if spec["kind"] == "ours" else _hf)(ckpt, arrays, device, spec)
    build_s = time.perf_counter() - t_build
    result = {
        "name": spec["name"],
        "kind": spec["kind"],
        **time_steps(step, device, warmup, steps),
        "build_s": build_s,
        "tokens": len(arrays["tokens"]),
        "sample_lengths": _sample_lengths(arrays),
    }
    if spec.get("prof") == "1" and device == "cuda":
        from benchmarks.kernel_profile import profile_step

        result["profile"] = profile_step(step)
    return result


def _loss_of_step(policy, optimizer, arrays, cfg) -> float:
    from swefleet.trainer.step import train_step

    return train_step(policy, optimizer, arrays, cfg)["loss"]


def run_long(ckpt: Path, batch_files: list[Path], device: str, spec: dict, args) -> None:
    """Long-context mode (in one process): each batch (one sample, shortest first) through one
    policy; prints one JSON line per length; stops after a length that does not fit."""
    import gc

    import torch

    from swefleet.batch import read_batch

    longest = max(len(read_batch(f)[0]["tokens"]) for f in batch_files)
    policy, optimizer, cfg = _build_ours(ckpt, device, spec, longest)
    deadline = time.time() + args.long_deadline_s if args.long_deadline_s else None
    for batch_file in batch_files:
        arrays, _ = read_batch(batch_file)
        n = len(arrays["tokens"])
        if deadline and time.time() > deadline:
            print(json.dumps({"name": spec["name"], "tokens": n, "error": "skipped: time budget spent"}), flush=True)  # fmt: skip
            continue
        fitted = False
        for head in dict.fromkeys([cfg.lm_head_dtype, "float32"]):
            run_cfg = cfg.model_copy(update={"lm_head_dtype": head})
            out = {"name": spec["name"], "kind": "ours", "tokens": n, "lm_head_dtype": head,
                   "sample_lengths": _sample_lengths(arrays)}  # fmt: skip
            try:
                step = partial(_loss_of_step, policy, optimizer, arrays, run_cfg)
                out.update(time_steps(step, device, args.warmup, args.steps))
                fitted = True
            except torch.OutOfMemoryError as e:
                out["error"] = f"out of memory: {str(e).splitlines()[0][:300]}"
                out["peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2**30
            optimizer.zero_grad(set_to_none=True)
            gc.collect()
            torch.cuda.empty_cache()
            print(json.dumps(out), flush=True)
            if fitted:
                break
        if not fitted:
            return


def _run_isolated(args, ckpt: Path, batch_file: Path, device: str, spec: dict, left_s) -> dict:
    """One variant in its own process; with a time budget it may run `left_s` + 60 s."""
    ranks = int(spec.get("ranks", "1"))
    launcher = [sys.executable]
    if ranks > 1:
        launcher += ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={ranks}"]
    cmd = [*launcher, __file__, "--worker", json.dumps(spec), "--ckpt", str(ckpt)]
    cmd += ["--batch-file", str(batch_file), "--device", device]
    cmd += ["--warmup", str(args.warmup), "--steps", str(args.steps)]
    timeout = None if left_s is None else max(left_s, 0) + 60
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=timeout)
    except subprocess.TimeoutExpired:
        print(f"variant {spec['name']} timed out after {timeout:.0f} s", file=sys.stderr)
        return {"name": spec["name"], "kind": spec["kind"], "error": f"timed out ({timeout:.0f} s)"}
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stdout + proc.stderr)[-3000:]
        print(f"variant {spec['name']} failed (exit {proc.returncode}):\n{tail}", file=sys.stderr)
        return {"name": spec["name"], "kind": spec["kind"], "error": tail[-500:]}
    return json.loads(lines[-1])


def summarise(results: list[dict], hf: dict, seq_len: int, device_name: str) -> None:
    """Add tokens/s, MFU (ours and torchtitan's convention) to each successful result."""
    from swefleet.trainer.flops import peak_flops, step_flops, titan_step_flops

    peak = peak_flops(device_name)
    for r in results:
        if "error" in r:
            continue
        lengths = r.get("sample_lengths") or [seq_len] * (r["tokens"] // seq_len)
        r["tokens_per_s"] = r["tokens"] / r["step_s"]
        gpus = r.get("ranks", 1)
        r["tflops"] = step_flops(hf, lengths) / r["step_s"] / 1e12
        r["mfu"] = r["tflops"] * 1e12 / (peak * gpus) if peak else None
        titan = titan_step_flops(hf, lengths, max(lengths)) / r["step_s"]
        r["titan_mfu"] = titan / (peak * gpus) if peak else None


def print_table(results: list[dict]) -> None:
    print(f"{'variant':34} {'tokens/s':>10} {'step s':>8} {'min-max s':>13} {'MFU':>7} "
          f"{'titan MFU':>9} {'peak GiB':>9} {'1st step s':>10} {'loss[0]':>10}")  # fmt: skip
    for r in results:
        if "error" in r:
            print(f"{r['name']:34} FAILED: {r['error'].splitlines()[-1][:80]}")
            continue

        def pct(x):
            return f"{100 * x:.1f}%" if x is not None else "-"

        mem = f"{r['peak_mem_gib']:.1f}" if "peak_mem_gib" in r else "-"
        spread = f"{r.get('step_s_min', r['step_s']):.3f}-{r.get('step_s_max', r['step_s']):.3f}"
        print(f"{r['name']:34} {r['tokens_per_s']:>10,.0f} {r['step_s']:>8.3f} {spread:>13} {pct(r['mfu']):>7} "
              f"{pct(r['titan_mfu']):>9} {mem:>9} {r['first_step_s']:>10.1f} {r['losses'][0]:>10.5f}")  # fmt: skip


def headline(results, preset, seq_len, batch, device_name) -> dict:
    ok = [r for r in results if "error" not in r]
    ours = next((r for r in ok if r["kind"] == "ours"), None)
    hf = next((r for r in ok if r["kind"] == "hf"), None)

    def get(r, key):
        return r.get(key) if r else None

    return {
        "tokens_per_s": get(ours, "tokens_per_s"),
        "hf_tokens_per_s": get(hf, "tokens_per_s"),
        "speedup": ours["tokens_per_s"] / hf["tokens_per_s"] if ours and hf else None,
        "mfu": get(ours, "mfu"),
        "hf_mfu": get(hf, "mfu"),
        "titan_mfu": get(ours, "titan_mfu"),
        "peak_mem_gib": get(ours, "peak_mem_gib"),
        "hf_peak_mem_gib": get(hf, "peak_mem_gib"),
        "device": device_name,
        "model": preset,
        "seq_len": seq_len,
        "batch": batch,
        "variant": get(ours, "name"),
        "hf_variant": get(hf, "name"),
        "variants": [
            {k: r.get(k) for k in VARIANT_FIELDS}
            for r in results
        ],
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--preset", choices=sorted(PRESETS), default="tiny")
    p.add_argument("--seq-len", type=int, help="tokens per sample (= per row)")
    p.add_argument("--layers", type=int, help="keep only this many layers of the preset (a truncation: same layer shapes, fewer of them)")  # fmt: skip
    p.add_argument("--batch", type=int, help="samples per step")
    p.add_argument("--steps", type=int, default=5, help="timed steps (median)")
    p.add_argument("--warmup", type=int, default=2, help="untimed first steps")
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--variants", help=f"comma list; default {CUDA_VARIANTS} (cuda), {CPU_VARIANTS} (cpu)")  # fmt: skip
    p.add_argument("--isolate", choices=["auto", "yes", "no"], default="auto",
                   help="one process per variant (auto: on cuda)")  # fmt: skip
    p.add_argument("--time-budget-s", type=float, default=None,
                   help="skip the remaining variants once this much time has passed")  # fmt: skip
    p.add_argument("--long", help="long-context mode: comma list of sample lengths (e.g. 32768,65536,131072)")  # fmt: skip
    p.add_argument("--long-variant", default="ours:ac=full:compile=1",
                   help="the `ours` variant of the long-context mode")  # fmt: skip
    p.add_argument("--worker", help=argparse.SUPPRESS)
    p.add_argument("--long-worker", help=argparse.SUPPRESS)
    p.add_argument("--long-deadline-s", type=float, help=argparse.SUPPRESS)
    p.add_argument("--ckpt", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--batch-file", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    import torch

    if args.long_worker:  # long-context mode, in its own process
        files = [Path(f) for f in json.loads(args.long_worker)]
        run_long(args.ckpt, files, args.device, parse_variant(args.long_variant), args)
        return 0
    if args.worker:  # one variant in this process (the parent isolates variants this way)
        from swefleet.trainer.main import init_distributed

        rank, world = init_distributed(args.device)
        result = run_variant(
            args.ckpt,
            args.batch_file,
            args.device,
            json.loads(args.worker),
            args.warmup,
            args.steps,
        )
        if rank == 0:
            print(json.dumps({**result, "ranks": world}))
        return 0

    device = (
        args.device if args.device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    )
    seq_len = args.seq_len or DEFAULT_SIZES[args.preset][0]
    batch = args.batch or DEFAULT_SIZES[args.preset][1]
    specs = [parse_variant(v) for v in (args.variants or (CUDA_VARIANTS if device == "cuda" else CPU_VARIANTS)).split(",")]  # fmt: skip
    isolate = args.isolate == "yes" or (args.isolate == "auto" and device == "cuda")
    device_name = torch.cuda.get_device_name() if device == "cuda" else "cpu"
    hf_shape = dict(PRESETS[args.preset])
    if args.layers:
        hf_shape["num_hidden_layers"] = args.layers
    if args.long:
        return main_long(args, device, device_name, hf_shape)
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="swefleet-bench-") as tmp:
        ckpt = make_checkpoint(hf_shape, Path(tmp) / "model", device)
        batch_file = make_batch(Path(tmp) / "batch.npz", hf_shape["vocab_size"], seq_len, batch)
        print(f"{args.preset} checkpoint + batch ({batch} x {seq_len}) in {time.perf_counter() - t_start:.1f} s on {device_name}", flush=True)  # fmt: skip
        results = []
        for spec in specs:
            if args.time_budget_s and time.perf_counter() - t_start > args.time_budget_s:
                results.append({**spec, "error": "skipped: time budget spent"})
                continue
            if isolate or int(spec.get("ranks", "1")) > 1:
                left = args.time_budget_s and args.time_budget_s - (time.perf_counter() - t_start)
                r = _run_isolated(args, ckpt, batch_file, device, spec, left or None)
            else:
                r = run_variant(ckpt, batch_file, device, spec, args.warmup, args.steps)
            results.append(r)
            print(f"  {spec['name']}: {json.dumps({k: v for k, v in r.items() if k != 'error'})}", flush=True)  # fmt: skip
    summarise(results, hf_shape, seq_len, device_name)
    print_table(results)
    print(json.dumps({**headline(results, args.preset, seq_len, batch, device_name), "layers": hf_shape["num_hidden_layers"]}))  # fmt: skip
    return 0


def main_long(args, device: str, device_name: str, hf_shape: dict) -> int:
    """Long-context mode: checkpoint + one batch per length, one worker process for all."""
    lengths = sorted(int(x) for x in args.long.split(","))
    spec = parse_variant(args.long_variant)
    if spec["kind"] != "ours":
        raise ValueError("--long-variant must be an `ours` variant")
    t_start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="swefleet-bench-") as tmp:
        ckpt = make_checkpoint(hf_shape, Path(tmp) / "model", device, max(40960, lengths[-1]))
        files = [
            str(make_batch(Path(tmp) / f"long_{n}.npz", hf_shape["vocab_size"], n, 1))
            for n in lengths
        ]
        print(f"{args.preset} checkpoint + {len(files)} batches in {time.perf_counter() - t_start:.1f} s on {device_name}", flush=True)  # fmt: skip
        cmd = [sys.executable, __file__, "--long-worker", json.dumps(files), "--ckpt", str(ckpt)]
        cmd += ["--device", device, "--warmup", str(args.warmup), "--steps", str(args.steps)]
        cmd += ["--long-variant", args.long_variant, "--preset", args.preset]
        if args.time_budget_s:
            cmd += ["--long-deadline-s", str(args.time_budget_s - (time.perf_counter() - t_start))]
        results = []
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) as proc:
            for line in proc.stdout:  # echo as it comes: a killed run still shows its lengths
                print(f"  {line.rstrip()}", flush=True)
                if line.startswith("{"):
                    results.append(json.loads(line))
        if proc.returncode != 0:
            print(f"long-context worker exit {proc.returncode}", file=sys.stderr)
    summarise(results, hf_shape, lengths[-1], device_name)
    for r in results:
        r["name"] = f"{r['tokens']} tokens, head {r.get('lm_head_dtype', '-')}"
    print_table(results)
    fitted = [r for r in results if "error" not in r]
    best = max(fitted, key=lambda r: r["tokens"], default=None)
    keys = ("tokens", "lm_head_dtype", "tokens_per_s", "mfu", "step_s", "peak_mem_gib", "error")
    print(json.dumps({
        "longest_tokens": best["tokens"] if best else None,
        "tokens_per_s": best["tokens_per_s"] if best else None,
        "mfu": best["mfu"] if best else None,
        "peak_mem_gib": best.get("peak_mem_gib") if best else None,
        "device": device_name,
        "model": args.preset,
        "variant": args.long_variant,
        "lengths": [{k: r.get(k) for k in keys} for r in results],
    }))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
