"""Router replay (R3): trainer <-> inference mismatch KL with and without replaying the experts
the embedded engine routed to (issue #7 target: >= 10x lower with replay).

    python benchmarks/router_replay.py                       # CPU, tiny MoE, bf16, < 1 min
    python benchmarks/router_replay.py --device cuda         # H200: Qwen3-30B-A3B layer shape,
                                                             # first 8 layers, bf16

Steps (`trainer/replay_check.py`): write a random-init Qwen3-MoE HF checkpoint (`--shape`,
weights drawn with `--gain` / sqrt(fan_in) so routing and next-token distributions are far from
uniform, saved in `--dtype`); generate `--prompts` x `--max-tokens` tokens (temperature 1) from
random `--prompt-len`-token prompts with the embedded engine in one continuous batch, which
returns each sequence's routed experts (vLLM's wire format, decoded back); then the trainer
(torchtitan, fp32 master weights, bf16 autocast when `--dtype bfloat16`: the production setup)
recomputes the log-probs of the generated tokens twice: with its own routing and replaying the
engine's. Reported: mismatch KL mean(exp(d) - d - 1), d = log pi_trainer - log mu_engine over
generated tokens, both ways, their ratio, and `expert_agreement` (fraction of (token, layer)
pairs where the trainer's own top-k set equals the engine's). The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--device", default="cpu")
    p.add_argument(
        "--shape",
        default="",
        help="tiny | small | 30b-a3b-8l (default: small on CPU, 30b-a3b-8l on CUDA)",
    )
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"])
    p.add_argument("--prompts", type=int, default=0, help="default 4 on CPU, 16 on CUDA")
    p.add_argument("--prompt-len", type=int, default=0, help="default 24 on CPU, 256 on CUDA")
    p.add_argument("--max-tokens", type=int, default=0, help="default 32 on CPU, 128 on CUDA")
    p.add_argument("--gain", type=float, default=1.0, help="weight scale x 1/sqrt(fan_in)")
    p.add_argument(
        "--attention", default="", help="trainer attention (default: sdpa on CPU, varlen on CUDA)"
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads; 0: default")
    args = p.parse_args(argv)
    cuda = args.device.startswith("cuda")
    args.shape = args.shape or ("30b-a3b-8l" if cuda else "small")
    args.prompts = args.prompts or (16 if cuda else 4)
    args.prompt_len = args.prompt_len or (256 if cuda else 24)
    args.max_tokens = args.max_tokens or (128 if cuda else 32)
    args.attention = args.attention or ("varlen" if cuda else "sdpa")
    return args


def main(argv: list[str] | None = None) -> dict:
    import torch
    from swefleet.trainer.replay_check import (
        SHAPES,
        engine_rollouts,
        make_moe_checkpoint,
        trainer_mismatch,
    )

    args = _parse(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    shape = SHAPES[args.shape]
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="router-replay-") as tmp:
        ckpt = make_moe_checkpoint(
            Path(tmp) / "moe",
            shape,
            seed=args.seed,
            gain=args.gain,
            dtype=dtype,
            device=args.device,
        )
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
        t_ckpt = time.monotonic()
        gen = torch.Generator().manual_seed(args.seed)
        prompts = [
            torch.randint(1, shape["vocab_size"], (args.prompt_len,), generator=gen).tolist()
            for _ in range(args.prompts)
        ]
        rollouts = engine_rollouts(
            ckpt, prompts, args.max_tokens, device=args.device, dtype=args.dtype, seed=args.seed
        )
        gc.collect()  # the engine's model, before the trainer's fp32 copy
        if args.device.startswith("cuda"):
            torch.cuda.empty_cache()
        t_gen = time.monotonic()
        autocast = dtype if dtype != torch.float32 else None
        m = trainer_mismatch(
            ckpt, rollouts, device=args.device, attention=args.attention, autocast_dtype=autocast
        )
    t_end = time.monotonic()
    without, with_ = float(m["kl_without_replay"]), float(m["kl_with_replay"])
    result = {
        "kl_without_replay": without,
        "kl_with_replay": with_,
        "ratio": without / with_ if with_ > 0 else float("inf"),
        "expert_agreement": m["expert_agreement"],
        "device": torch.cuda.get_device_name(args.device)
        if args.device.startswith("cuda")
        else "cpu",
        "model": f"qwen3-moe {args.shape} ({shape['num_hidden_layers']} layers, "
        f"{shape['num_experts']} experts, top {shape['num_experts_per_tok']}), random "
        f"init gain {args.gain}, {args.dtype}",
        "dtype": args.dtype,
        "trainer_attention": args.attention,
        "sequences": args.prompts,
        "prompt_len": args.prompt_len,
        "generated_tokens": sum(len(r.tokens) for r in rollouts),
        "routed_experts_shape": list(rollouts[0].routed.shape),
        "routed_experts_dtype": str(rollouts[0].routed.dtype),
        "checkpoint_s": round(t_ckpt - t0, 1),
        "generate_s": round(t_gen - t_ckpt, 1),
        "trainer_s": round(t_end - t_gen, 1),
    }
    print(json.dumps(result), flush=True)
    return result


if __name__ == "__main__":
    main()
