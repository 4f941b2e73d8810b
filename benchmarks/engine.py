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
- `engine_dynamic` (with `--with-dynamic`): the engine's transformers-forward path, for reference;
- `multi_turn` (with `--multi-turn`): prefix reuse across turns. `conversations` episodes run
  `turns` turns together (static KV cache, one slot per episode; `--multi-turn-kv dynamic`: the
  dynamic cache, finished requests' K/V parked for reuse, with its own workload of 8 turns of
  +200 tokens and 32 sampled); turn k's prompt is turn k-1's
  prompt + its completion + `user_tokens` new tokens (turn 1: `first_prompt` tokens), `gen`
  tokens sampled per turn (seeded, temperature 1, `ignore_eos`). The same episodes run with the
  prefix cache off, then on. Fields: `off` / `on` each `{wall_s, turn_s (wall s per turn),
  prompt_tokens, cached_tokens, prefill_tokens}` (cached = prompt tokens not prefilled again,
  vLLM's `prefix_cache_hits`; prefill = prompt - cached, the tokens computed), `hit_rate` (on:
  cached / prompt tokens), `time_saved` (1 - on / off wall time), `speedup` (off / on wall
  time), `prefill_ratio` (off / on prefill tokens), `same_tokens` (both runs sampled identical
  tokens: the cache is exact). `--only-multi-turn` runs just this section.

tokens/s = generated tokens / wall time from first submit (or the `generate` call) to the last
token, prefill included. The last line printed is one JSON object: `tokens_per_s`,
`hf_generate_tokens_per_s`, `speedup`, `device`, `workload`, plus the details (per engine:
`ms_per_step` = wall time of the timed run / its decode steps, prefill included;
`graph_replay_ms` = GPU time of one replay of the largest decode graph, timed alone).
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

from benchmarks.shapes import QWEN3_SHAPES

PRESETS = {name: QWEN3_SHAPES[name] for name in ("tiny", "qwen3-0.6b")}
WORKLOADS = {"tiny": (8, 64, 32), "qwen3-0.6b": (64, 512, 256)}
#: conversations, first prompt, user tokens added per turn, generated per turn, turns
MULTI_TURN = {"tiny": (8, 1024, 64, 16, 4), "qwen3-0.6b": (64, 2048, 128, 128, 4)}
#: the same for `--multi-turn-kv dynamic`: agent-like turns (~200 observation tokens, 32 sampled)
MULTI_TURN_DYNAMIC = {"tiny": (4, 256, 200, 32, 8), "qwen3-0.6b": (64, 2048, 200, 32, 8)}


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
    from swefleet.inference.engine.core import GenerationResult, SamplingParams

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


def replay_ms(decoder, reps: int = 50) -> float:
    """GPU time of one replay of the largest captured decode graph (forward + sampling), the
    engine idle: the rest of `ms_per_step` is host work and prefill."""
    import torch

    graph = decoder._graphs[max(decoder._graphs)][0]
    graph.replay()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(reps):
        graph.replay()
    torch.cuda.synchronize()
    return round(1000 * (time.perf_counter() - t0) / reps, 3)


def bench_engine(model, prompts, gen: int, mode: str, graphs: bool) -> dict:
    from swefleet.inference.engine.core import Engine

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
        steps = engine.counters.decode_steps
        warm, tokens = run_engine(engine, prompts, gen)
        c = engine.counters
        out = {
            "kv_backend": engine.kv_mode,
            "cold_tokens_per_s": round(cold, 1),
            "tokens_per_s": round(warm, 1),
            "mean_decode_batch": round(c.decode_rows / c.decode_steps, 2),
            "ms_per_step": round(1000 * tokens / warm / (c.decode_steps - steps), 3),
        }
        decoder = getattr(engine._kv, "decoder", None)
        if decoder is not None:
            out["graph_captures"] = decoder.captures
            out["cuda_graphs"] = decoder.use_graphs
            if decoder.use_graphs and decoder._graphs:
                out["graph_replay_ms"] = replay_ms(decoder)
        return out
    finally:
        engine.shutdown()


def generate_all(engine, prompts: list[list[int]], params: list) -> list:
    """Submit every prompt at once; their results in order."""
    results: list = [None] * len(prompts)
    done = [threading.Event() for _ in prompts]

    def callback(i: int):
        def cb(r) -> None:
            results[i] = r
            done[i].set()

        return cb

    for i, (prompt, p) in enumerate(zip(prompts, params, strict=True)):
        engine.submit(prompt, p, callback(i))
    assert all(ev.wait(600) for ev in done), "engine did not finish"
    return results


def run_turns(engine, firsts: list[list[int]], users, gen: int) -> tuple[list, list, int]:
    """All conversations' turns in lockstep; returns wall s per turn, the last prompts, prompt
    tokens."""
    from swefleet.inference.engine.core import SamplingParams

    prompts, outputs, prompt_tokens, turn_s = [list(p) for p in firsts], [], 0, []
    for turn, extra in enumerate(users):
        t0 = time.perf_counter()
        if turn:
            prompts = [p + o + u for p, o, u in zip(prompts, outputs, extra, strict=True)]
        params = [
            SamplingParams(max_tokens=gen, temperature=1.0, ignore_eos=True, seed=i)
            for i in range(len(prompts))
        ]
        outputs = [r.token_ids for r in generate_all(engine, prompts, params)]
        prompt_tokens += sum(len(p) for p in prompts)
        turn_s.append(round(time.perf_counter() - t0, 3))
    return turn_s, prompts, prompt_tokens


def bench_multi_turn(model, preset: str, graphs: bool, kv_mode: str = "static") -> dict:
    import torch
    from swefleet.inference.engine.core import Engine

    n, first, user, gen, turns = (MULTI_TURN_DYNAMIC if kv_mode == "dynamic" else MULTI_TURN)[
        preset
    ]
    vocab = PRESETS[preset]["vocab_size"]
    rng = torch.Generator().manual_seed(1)
    firsts = torch.randint(1, vocab, (n, first), generator=rng).tolist()
    users = [None] + [
        torch.randint(1, vocab, (n, user), generator=rng).tolist() for _ in range(turns - 1)
    ]
    out: dict = {
        "workload": f"{n} conversations x {turns} turns: first prompt {first}, +{user} user "
        f"tokens per turn, {gen} generated per turn",
        "kv_mode": kv_mode,
    }
    with torch.inference_mode():  # warm-up (allocator, kernels): else the first run pays it
        model(input_ids=torch.tensor(firsts[:1], device=next(model.parameters()).device))
    finals = {}
    for name, on in (("off", False), ("on", True)):
        engine = Engine(
            model,
            frozenset(),
            max_model_len=first + (turns - 1) * (gen + user) + gen,
            max_batch_size=n,
            kv_mode=kv_mode,
            cuda_graphs=graphs,
            prefix_cache=on,
        )
        engine.start()
        try:
            turn_s, finals[name], prompt_tokens = run_turns(engine, firsts, users, gen)
        finally:
            engine.shutdown()
        c = engine.counters
        out[name] = {
            "wall_s": round(sum(turn_s), 3),
            "turn_s": turn_s,
            "prompt_tokens": prompt_tokens,
            "cached_tokens": c.prefix_hits,
            "prefill_tokens": prompt_tokens - c.prefix_hits,
        }
    on_, off = out["on"], out["off"]
    out.update(
        hit_rate=round(on_["cached_tokens"] / on_["prompt_tokens"], 4),
        time_saved=round(1 - on_["wall_s"] / off["wall_s"], 4),
        speedup=round(off["wall_s"] / on_["wall_s"], 2),
        prefill_ratio=round(off["prefill_tokens"] / max(on_["prefill_tokens"], 1), 2),
        same_tokens=finals["on"] == finals["off"],
    )
    return out


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
    p.add_argument("--multi-turn", action="store_true", help="also time prefix reuse across turns")
    p.add_argument("--only-multi-turn", action="store_true", help="just the multi-turn section")
    p.add_argument(
        "--multi-turn-kv",
        choices=["static", "dynamic"],
        default="static",
        help="KV cache of the multi-turn section (dynamic: its own 8-turn agent-like workload)",
    )
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

    if not args.only_multi_turn:
        bench_generation(model, prompts, gen, args, result)
    if args.multi_turn or args.only_multi_turn:
        result["multi_turn"] = bench_multi_turn(
            model, preset, not args.no_graphs, args.multi_turn_kv
        )
        print(f"multi-turn: {result['multi_turn']}", flush=True)
    print(json.dumps(result))


def bench_generation(model, prompts, gen: int, args, result: dict) -> None:
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


if __name__ == "__main__":
    main()
