"""Embedded engine generation throughput next to Hugging Face `generate`, same model, same work.

    python benchmarks/engine.py                     # CPU: tiny Qwen3, 8 x (64 + 32) tokens
    python benchmarks/engine.py --preset qwen3-0.6b # one H200: 64 x (512 + 256) tokens, bf16

One random-init Qwen3-shaped model (no download) serves every side in one process:

- `hf_generate`: `model.generate` on the whole batch at once (equal-length random prompts, no
  padding), multinomial sampling at temperature 1, exactly `gen` new tokens (min = max);
- `engine`: `inference.engine.core.Engine` with all `n` requests submitted at once, sampling at
  temperature 1 with `ignore_eos`, in the KV mode asked for (`--kv-mode`; `auto` is the static
  cache with CUDA-graph decode on CUDA and the dynamic cache on CPU). It runs twice: the first
  run pays one-time costs (graph captures), the second is the reported figure;
- `engine_dynamic` (with `--with-dynamic`): the engine's transformers-forward path, for reference.

tokens/s = generated tokens / wall time from first submit (or the `generate` call) to the last
token, prefill included. The last line printed is one JSON object: `tokens_per_s`,
`hf_generate_tokens_per_s`, `speedup`, `device`, `workload`, plus the details.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]
sys.path.insert(0, str(ROOT))

PRESETS = {
    "tiny": {
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 1024,
        "tie_word_embeddings": False,
    },
    "qwen3-0.6b": {
        "hidden_size": 1024,
        "intermediate_size": 3072,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "vocab_size": 151936,
        "tie_word_embeddings": True,
    },
}
WORKLOADS = {"tiny": (8, 64, 32), "qwen3-0.6b": (64, 512, 256)}


def build_model(preset: str, device: str, dtype: str):
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    cfg = Qwen3Config(
        **PRESETS[preset],
        max_position_embeddings=40960,
        rope_theta=1_000_000.0,
        eos_token_id=None,
        bos_token_id=None,
        pad_token_id=0,
    )
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(cfg)
    model.to(getattr(torch, dtype)).eval()
    if device.startswith("cuda"):
        torch.backends.cuda.enable_cudnn_sdp(False)  # as inference.engine.model.load_model
    return model


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def run_hf(model, prompts, gen: int, device: str) -> float:
    import torch

    ids = torch.tensor(prompts, device=device)
    kwargs = {
        "attention_mask": torch.ones_like(ids),
        "do_sample": True,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "pad_token_id": 0,
        "eos_token_id": None,
    }
    with torch.inference_mode():
        model.generate(ids[:, :16], max_new_tokens=4, min_new_tokens=4, **kwargs)  # warm-up
        sync(device)
        t0 = time.perf_counter()
        out = model.generate(ids, max_new_tokens=gen, min_new_tokens=gen, **kwargs)
        sync(device)
        dt = time.perf_counter() - t0
    assert out.shape == (len(prompts), len(prompts[0]) + gen), out.shape
    return len(prompts) * gen / dt


def run_engine(engine, prompts, gen: int) -> tuple[float, int]:
    from inference.engine.core import GenerationResult, SamplingParams

    results: list = [None] * len(prompts)
    done = [threading.Event() for _ in prompts]
    params = SamplingParams(max_tokens=gen, temperature=1.0, ignore_eos=True, seed=1)
    t0 = time.perf_counter()
    for i, prompt in enumerate(prompts):

        def cb(r, i=i):
            results[i] = r
            done[i].set()

        engine.submit(prompt, params, cb)
    for ev in done:
        assert ev.wait(600), "engine did not finish"
    dt = time.perf_counter() - t0
    assert all(isinstance(r, GenerationResult) for r in results), results[0]
    tokens = sum(len(r.token_ids) for r in results)
    assert tokens == len(prompts) * gen, tokens
    return tokens / dt, tokens


def bench_engine(model, prompts, gen: int, mode: str, graphs: bool) -> dict:
    from inference.engine.core import Engine

    engine = Engine(
        model,
        frozenset(),
        max_model_len=len(prompts[0]) + gen,
        max_batch_size=len(prompts),
        kv_mode=mode,
        kv_capacity=0,
        cuda_graphs=graphs,
    )
    engine.start()
    try:
        cold, _ = run_engine(engine, prompts, gen)
        warm, _ = run_engine(engine, prompts, gen)
        c = engine.counters
        out = {
            "kv_backend": engine.kv_mode,
            "cold_tokens_per_s": round(cold, 1),
            "tokens_per_s": round(warm, 1),
            "mean_decode_batch": round(c.decode_rows / c.decode_steps, 2),
        }
        decoder = getattr(engine._kv, "decoder", None)
        if decoder is not None:
            out["graph_captures"] = decoder.captures
            out["cuda_graphs"] = decoder.use_graphs
        return out
    finally:
        engine.shutdown()


def main() -> None:
    import torch

    p = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--preset", choices=sorted(PRESETS), default="")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--kv-mode", choices=["auto", "static", "dynamic"], default="auto")
    p.add_argument("--no-graphs", action="store_true", help="static cache without CUDA graphs")
    p.add_argument("--with-dynamic", action="store_true", help="also time the dynamic KV path")
    p.add_argument("--skip-hf", action="store_true")
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: default)")
    args = p.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    preset = args.preset or ("qwen3-0.6b" if args.device.startswith("cuda") else "tiny")
    n, prompt_len, gen = WORKLOADS[preset]
    dtype = "bfloat16" if args.device.startswith("cuda") else "float32"
    model = build_model(preset, args.device, dtype)
    gen_rng = torch.Generator().manual_seed(0)
    vocab = PRESETS[preset]["vocab_size"]
    prompts = torch.randint(1, vocab, (n, prompt_len), generator=gen_rng).tolist()
    device_name = torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu"
    result: dict = {
        "device": device_name,
        "preset": preset,
        "dtype": dtype,
        "workload": f"{n} sequences x ({prompt_len} prompt + {gen} generated) tokens",
    }

    hf = None if args.skip_hf else run_hf(model, prompts, gen, args.device)
    print(f"hf generate: {hf} tokens/s", flush=True)
    errors = {}
    try:
        result["engine"] = bench_engine(model, prompts, gen, args.kv_mode, not args.no_graphs)
    except Exception as exc:  # noqa: BLE001 - report, then try the eager static path
        errors["engine"] = repr(exc)
        print(f"engine failed: {exc!r}; retrying without CUDA graphs", flush=True)
        result["engine"] = bench_engine(model, prompts, gen, args.kv_mode, False)
    print(f"engine: {result['engine']}", flush=True)
    if args.with_dynamic:
        result["engine_dynamic"] = bench_engine(model, prompts, gen, "dynamic", False)
        print(f"engine dynamic: {result['engine_dynamic']}", flush=True)
    tps = result["engine"]["tokens_per_s"]
    result.update(
        tokens_per_s=tps,
        hf_generate_tokens_per_s=None if hf is None else round(hf, 1),
        speedup=None if hf is None else round(tps / hf, 2),
        errors=errors,
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
