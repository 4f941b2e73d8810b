"""Rollout throughput through swefleet's fleet client against `vllm serve`, next to vLLM's own
offline throughput (`vllm.LLM.generate`), same engine settings, one run.

    PYTHONPATH=<vllm site>:<repo> python3 benchmarks/vllm_fleet.py [--gpu-mem 0.5] [--repeats 2]
    python benchmarks/vllm_fleet.py --server-kind scripted [--offline-tok-s N]   # CPU, no vLLM

Workload (as the H200 smoke test): a random-init Qwen3-0.6B shape (config.json only, vLLM's
`load_format="dummy"`, no tokenizer: token-id prompts), bf16, `--prompts` 64 x (`--prompt-len`
512 prompt + `--gen-len` 256 generated) token ids, temperature 1, top-p 1, the sampled token's
logprob returned, after a warm-up of the same shape (other prompts); prefix caching off on both
sides; the best of `--repeats` timed runs per side. tokens/s = generated tokens / wall time.

- offline: `vllm.LLM(...).generate` in a subprocess (its GPU memory is freed before the served
  half starts), `ignore_eos` + `min_tokens`: exactly `gen_len` tokens per prompt;
- fleet: `vllm serve` started by swefleet's own launcher (`inference.fleet_launch.ServerFleet`,
  argv from `inference.vllm_launch.serve_command`), then all prompts at once through
  `FleetClient.generate(prompt_ids, max_tokens=gen_len)` (`server_api="vllm"`). The fleet client
  cannot ask for `ignore_eos`/`min_tokens`; the config.json has no `eos_token_id`, so nothing
  stops a request early, and the tokens actually generated are counted (`fleet_tokens`).
  `client_cpu_s` is this process's CPU time during the timed fleet run;
- plain http: the same requests through one bare aiohttp session (what vLLM's API server costs
  without swefleet's client on top: offline / plain = the server's share, plain / fleet = ours).

Served variants (`--variants`, each its own server start, same engine settings): `a<N>` =
`--api-server-count N` (N HTTP front-end processes share the parsing and the per-token logprob
responses), optional `s<K>` = the fleet streams (`inference.stream`) and
the server sends `--stream-interval K` tokens per chunk, so responses are built while the batch
decodes instead of all at its end. E.g. `--variants a1,a4,a1s16,a4s16`.

ratio = fleet / offline tokens/s of the best variant (goal >= 0.90); every variant's figures are
in `variants`. Exit 2 with one line when vLLM or CUDA is
missing. Expect two engine starts of ~70 s each on an H200 (torch.compile + CUDA graphs; a
later run reuses vLLM's compile cache). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ENV = {"VLLM_USE_FLASHINFER_SAMPLER": "0", "TVM_FFI_DISABLE_TORCH_C_DLPACK": "1",
       "VLLM_NO_USAGE_STATS": "1", "NCCL_NVLS_ENABLE": "0", "HF_HUB_OFFLINE": "1",
       "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
# Qwen3-0.6B's shape; no eos/bos ids: no stop token, so served requests run to max_tokens too
CONFIG = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "attention_bias": False,
          "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024, "intermediate_size": 3072,
          "max_position_embeddings": 40960, "num_attention_heads": 16, "num_hidden_layers": 28,
          "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_theta": 1000000,
          "tie_word_embeddings": True, "torch_dtype": "bfloat16", "vocab_size": 151936}
MAX_NUM_SEQS, MAX_BATCHED_TOKENS, MAX_MODEL_LEN = 128, 16384, 4096
GOAL = 0.90


def prompts(a: argparse.Namespace, seed: int) -> list[list[int]]:
    return [[(i * 7919 + j * 31 + seed * 104729) % 150000 + 10 for j in range(a.prompt_len)]
            for i in range(a.prompts)]


def engine_kwargs(a: argparse.Namespace) -> dict:
    """`vllm.LLM` settings; the served side gets the same through `VLLMLaunch` + extra_args."""
    return {"load_format": "dummy", "skip_tokenizer_init": True, "dtype": "bfloat16", "seed": 0,
            "max_model_len": MAX_MODEL_LEN, "gpu_memory_utilization": a.gpu_mem,
            "enable_prefix_caching": False, "max_num_seqs": MAX_NUM_SEQS,
            "max_num_batched_tokens": MAX_BATCHED_TOKENS, "enforce_eager": False,
            "logprobs_mode": "raw_logprobs", "max_logprobs": 20}


def offline_child(a: argparse.Namespace) -> None:
    """In the subprocess: start `vllm.LLM`, warm up, time `repeats` runs; result to a file."""
    from vllm import LLM, SamplingParams

    t0 = time.perf_counter()
    llm = LLM(model=str(a.model_dir), **engine_kwargs(a))
    startup_s = time.perf_counter() - t0
    sp = SamplingParams(max_tokens=a.gen_len, min_tokens=a.gen_len, ignore_eos=True,
                        temperature=1.0, top_p=1.0, logprobs=0, detokenize=False)
    llm.generate([{"prompt_token_ids": p} for p in prompts(a, 1)], sp, use_tqdm=False)
    runs = []
    for _ in range(a.repeats):
        t0 = time.perf_counter()
        outs = llm.generate([{"prompt_token_ids": p} for p in prompts(a, 0)], sp, use_tqdm=False)
        runs.append((time.perf_counter() - t0, sum(len(o.outputs[0].token_ids) for o in outs)))
    s, tokens = min(runs)
    Path(a.offline_child).write_text(json.dumps(
        {"startup_s": startup_s, "seconds": s, "tokens": tokens, "tok_s": tokens / s}))


def run_offline(a: argparse.Namespace, work: Path) -> dict:
    out, log = work / "offline.json", work / "offline.log"
    argv = [sys.executable, __file__, "--offline-child", str(out), "--model-dir",
            str(a.model_dir), *sys.argv[1:]]
    with open(log, "wb") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        code = proc.wait(timeout=900)
    finally:  # no engine process of its group may keep GPU memory from the served half
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    if code != 0 or not out.exists():
        raise SystemExit(f"offline half failed ({code}); {log}:\n{log.read_text()[-3000:]}")
    return json.loads(out.read_text())


async def timed_fleet(fleet, batch: list[list[int]], gen: int) -> dict:
    cpu0, t0 = time.process_time(), time.perf_counter()
    outs = await asyncio.gather(*(fleet.generate(p, max_tokens=gen) for p in batch))
    s, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    tokens = sum(len(o.completion_ids) for o in outs)
    return {"seconds": s, "tokens": tokens, "tok_s": tokens / s, "client_cpu_s": cpu}


async def timed_plain(url: str, cfg, batch: list[list[int]], gen: int) -> dict:
    import aiohttp
    import orjson
    from swefleet.inference.fleet_request import request_body

    async with aiohttp.ClientSession() as http:
        async def one(p: list[int]) -> int:
            async with http.post(f"{url}/v1/completions", json=request_body(cfg, p, gen)) as r:
                r.raise_for_status()
                return len(orjson.loads(await r.read())["choices"][0]["token_ids"])

        t0 = time.perf_counter()
        tokens = sum(await asyncio.gather(*(one(p) for p in batch)))
        s = time.perf_counter() - t0
    return {"seconds": s, "tokens": tokens, "tok_s": tokens / s}


@dataclass(frozen=True)
class Variant:
    """One served configuration: API server processes, streamed chunks of `stream_interval`."""

    name: str
    api_servers: int = 1
    stream_interval: int = 0
    """0: unstreamed requests."""


def parse_variant(spec: str) -> Variant:
    m = re.fullmatch(r"a(\d+)(?:s(\d+))?", spec)
    if not m or int(m.group(1)) < 1 or (m.group(2) and int(m.group(2)) < 1):
        raise SystemExit(f"vllm_fleet: bad variant {spec!r} (a<N>[s<K>], e.g. a1, a4s16)")
    return Variant(spec, int(m.group(1)), int(m.group(2) or 0))


async def served(a: argparse.Namespace, urls: list[str], cfg, plain: bool) -> dict:
    """Warm-up, then `repeats` alternating timed runs of the fleet (and plain HTTP); best of each."""
    from swefleet.inference.fleet import FleetClient

    async with FleetClient(urls, cfg) as fleet:
        await asyncio.gather(*(fleet.generate(p, max_tokens=a.gen_len) for p in prompts(a, 1)))
        fleet_runs, plain_runs = [], []
        for _ in range(a.repeats):
            fleet_runs.append(await timed_fleet(fleet, prompts(a, 0), a.gen_len))
            if plain:
                plain_runs.append(await timed_plain(urls[0], cfg, prompts(a, 0), a.gen_len))
    best = {"fleet": max(fleet_runs, key=_tok_s)}
    return {**best, "plain": max(plain_runs, key=_tok_s)} if plain else best


def _tok_s(run: dict) -> float:
    return run["tok_s"]


def client_config(v: Variant, **kw):
    """The fleet client's config for variant `v` (streamed or not)."""
    from swefleet.inference.config import InferenceConfig

    return InferenceConfig(**kw, stream=bool(v.stream_interval))


async def run_variant(a: argparse.Namespace, work: Path, v: Variant) -> dict:
    from swefleet.inference.config import ServerSpec

    if a.server_kind == "scripted":
        from swefleet.inference.launch import start_scripted_server

        t0 = time.perf_counter()
        with start_scripted_server(log_path=work / f"server-{v.name}.log") as server:
            startup_s = time.perf_counter() - t0
            cfg = client_config(v)
            return {"startup_s": startup_s, **await served(a, [server.url], cfg, True)}
    from swefleet.inference.fleet_launch import ServerFleet
    from swefleet.inference.vllm_launch import VLLMLaunch

    vllm_cli = work / "vllm"  # `vllm` of this interpreter, wherever PYTHONPATH put vLLM
    vllm_cli.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m vllm.entrypoints.cli.main "$@"\n')
    vllm_cli.chmod(0o755)
    launch = VLLMLaunch(executable=str(vllm_cli), max_model_len=MAX_MODEL_LEN,
                        enable_prefix_caching=False, max_num_seqs=MAX_NUM_SEQS,
                        max_num_batched_tokens=MAX_BATCHED_TOKENS,
                        api_server_count=v.api_servers, stream_interval=max(1, v.stream_interval),
                        extra_args=["--load-format", "dummy", "--skip-tokenizer-init",
                                    "--return-tokens-as-token-ids"])
    cfg = client_config(v, kind="vllm", server_api="vllm", model_name="vllm-fleet-bench",
                        vllm=launch, startup_timeout_s=900)
    servers = ServerFleet("vllm", [ServerSpec(index=0, gpu_memory_fraction=a.gpu_mem)], cfg,
                          work / f"logs-{v.name}")
    t0 = time.perf_counter()
    try:
        await servers.start(a.model_dir)
        startup_s = time.perf_counter() - t0
        return {"startup_s": startup_s, **await served(a, servers.urls, cfg, True)}
    finally:
        await asyncio.to_thread(servers.stop)


async def run_served(a: argparse.Namespace, work: Path) -> dict[str, dict]:
    """Every variant in turn (one server at a time on the GPU)."""
    return {v.name: await run_variant(a, work, v) for v in a.variants}


def missing(a: argparse.Namespace) -> str | None:
    """Why the vLLM run cannot happen here, or None."""
    if a.server_kind != "vllm":
        return None
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not importable (run with PYTHONPATH=<vllm site>:<repo>)"
    import torch

    return None if torch.cuda.is_available() else "CUDA is not available (needs a GPU)"


def report(a: argparse.Namespace, offline: dict | None, variants: dict[str, dict]) -> dict:
    off_tok_s = offline["tok_s"] if offline else a.offline_tok_s
    exact = a.prompts * a.gen_len
    print(f"{a.prompts} x ({a.prompt_len} + {a.gen_len}) tokens, server {a.server_kind}, "
          f"best of {a.repeats}")
    print(f"{'side':<26} {'tokens':>8} {'seconds':>8} {'tokens/s':>10} {'ratio':>6} "
          f"{'startup s':>10}")
    if offline:
        print(f"{'offline vllm.LLM':<26} {offline['tokens']:>8} {offline['seconds']:>8.3f} "
              f"{offline['tok_s']:>10.0f} {1:>6.3f} {offline['startup_s']:>10.1f}")
    rows = {}
    for name, srv in variants.items():
        for side in ("fleet", "plain"):
            if r := srv.get(side):
                ratio = r["tok_s"] / off_tok_s if off_tok_s else None
                rows[f"{side} {name}"] = {**r, "ratio": ratio}
                up = f"{srv['startup_s']:.1f}" if side == "fleet" else ""
                print(f"{side + ' ' + name:<26} {r['tokens']:>8} {r['seconds']:>8.3f} "
                      f"{r['tok_s']:>10.0f} {ratio or 0:>6.3f} {up:>10}")
    best_name = max(variants, key=lambda n: variants[n]["fleet"]["tok_s"])
    best = variants[best_name]
    fleet, plain = best["fleet"], best["plain"]
    ratio = fleet["tok_s"] / off_tok_s if off_tok_s else None
    cpu_ms = 1e3 * fleet["client_cpu_s"] / a.prompts
    print(f"fleet client CPU ({best_name}): {fleet['client_cpu_s']:.3f} s ({cpu_ms:.2f} ms per "
          f"request, {fleet['client_cpu_s'] / fleet['seconds']:.1%} of the wall time)")
    if ratio is not None:
        print(f"ratio fleet / offline = {ratio:.3f} with {best_name} (goal >= {GOAL}: "
              f"{'met' if ratio >= GOAL else 'NOT met'})")
    return {"offline_tok_s": off_tok_s, "fleet_tok_s": fleet["tok_s"], "ratio": ratio,
            "goal": GOAL, "best_variant": best_name, "plain_http_tok_s": plain["tok_s"],
            "plain_over_offline": plain["tok_s"] / off_tok_s if off_tok_s else None,
            "fleet_over_plain": fleet["tok_s"] / plain["tok_s"],
            "offline_tokens": offline["tokens"] if offline else None,
            "fleet_tokens": fleet["tokens"], "fleet_exact_tokens": fleet["tokens"] == exact,
            "offline_s": offline["seconds"] if offline else None, "fleet_s": fleet["seconds"],
            "client_cpu_s": fleet["client_cpu_s"], "client_cpu_ms_per_request": cpu_ms,
            "offline_startup_s": offline["startup_s"] if offline else None,
            "server_startup_s": best["startup_s"], "server_kind": a.server_kind,
            "variants": {k: {"tok_s": r["tok_s"], "ratio": r["ratio"], "seconds": r["seconds"],
                             "tokens": r["tokens"]} for k, r in rows.items()},
            "prompts": a.prompts, "prompt_len": a.prompt_len, "gen_len": a.gen_len,
            "repeats": a.repeats, "gpu_mem": a.gpu_mem}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--server-kind", choices=["vllm", "scripted"], default="vllm",
                   help="scripted: the model-free loopback server, client half only (CPU tests)")
    p.add_argument("--prompts", type=int, default=64)
    p.add_argument("--prompt-len", type=int, default=512)
    p.add_argument("--gen-len", type=int, default=256)
    p.add_argument("--repeats", type=int, default=2, help="timed runs per side (best kept)")
    p.add_argument("--gpu-mem", type=float, default=0.5, help="gpu_memory_utilization")
    p.add_argument("--variants", default="a1", type=lambda s: [parse_variant(v) for v in
                   s.split(",")], help="served variants a<N>[s<K>], comma-separated")
    p.add_argument("--offline-tok-s", type=float, default=None,
                   help="skip the offline half and compare with this tokens/s")
    p.add_argument("--offline-child", default="", help=argparse.SUPPRESS)
    p.add_argument("--model-dir", type=Path, default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main() -> int:
    a = parse()
    for key, value in ENV.items():
        os.environ.setdefault(key, value)
    if a.offline_child:
        offline_child(a)
        return 0
    if problem := missing(a):
        print(f"vllm_fleet: {problem}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="vllm-fleet-") as d:
        work = Path(d)
        a.model_dir = work / "qwen3-0.6b-random"
        a.model_dir.mkdir()
        (a.model_dir / "config.json").write_text(json.dumps(CONFIG))
        offline = run_offline(a, work) if a.server_kind == "vllm" and not a.offline_tok_s else None
        srv = asyncio.run(run_served(a, work))
    print(json.dumps(report(a, offline, srv)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
