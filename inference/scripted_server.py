"""A deterministic OpenAI-compatible server with no model, for fleet tests and benchmarks.

    python -m inference.scripted_server --port 0 --port-file F [--delay-s 0] [--policy-version 0]

It speaks the same wire schemas as the embedded engine (`inference/wire.py`): completion token
`i` is `(last prompt id + i + 1) % vocab_size` with logprob -0.5, finish_reason `length` (or
`stop` on a `stop_token_ids` hit). `/update_weights` only records the version; `/stats` counts
completions so tests can prove a request was (not) retried, and records the peak of requests in
flight and the `cache_salt`s seen.

With `--kv-capacity N` `/metrics` also exposes vLLM's `vllm:kv_cache_usage_perc` as
min(1, requests in flight / N), for the fleet's adaptive concurrency. vLLM 0.26's dev routes
used for weight updates are emulated: `/pause`, `/resume`, and `/collective_rpc` with method
`update_weights_from_path` (args `[path, version]`; answers `{"results": ["<version>"]}`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging

from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from inference.serving import serve
from inference.wire import (
    CompletionChoice,
    CompletionLogProbs,
    CompletionRequest,
    CompletionResponse,
    HealthResponse,
    UpdateWeightsRequest,
    UpdateWeightsResponse,
    Usage,
)


def scripted_tokens(
    prompt_ids: list[int], max_tokens: int, vocab_size: int, stop_ids: frozenset[int] = frozenset()
) -> tuple[list[int], str]:
    out: list[int] = []
    for i in range(max_tokens):
        out.append((prompt_ids[-1] + i + 1) % vocab_size)
        if out[-1] in stop_ids:
            return out, "stop"
    return out, "length"


def create_app(
    delay_s: float = 0.0,
    policy_version: int = 0,
    vocab_size: int = 1024,
    hang_token: int = -1,
    kv_capacity: int = 0,
) -> FastAPI:
    app = FastAPI(title="swefleet scripted server")
    state = {"version": policy_version, "completions": 0, "delay_s": delay_s}
    load = {"in_flight": 0, "peak": 0, "paused": 0, "resumed": 0}
    salts: dict[str, int] = {}

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest) -> CompletionResponse:
        if body.cache_salt is not None:
            salts[body.cache_salt] = salts.get(body.cache_salt, 0) + 1
        load["in_flight"] += 1
        load["peak"] = max(load["peak"], load["in_flight"])
        try:
            if state["delay_s"]:
                await asyncio.sleep(state["delay_s"])
        finally:
            load["in_flight"] -= 1
        prompt = body.prompt if isinstance(body.prompt, list) else [ord(c) for c in body.prompt]
        if hang_token >= 0 and prompt and prompt[0] == hang_token:
            await asyncio.sleep(24 * 3600)  # a hung request: only the client's deadline ends it
        ids, finish = scripted_tokens(
            prompt, body.max_tokens, vocab_size, frozenset(body.stop_token_ids or ())
        )
        state["completions"] += 1
        logprobs = CompletionLogProbs(
            token_logprobs=[-0.5] * len(ids), tokens=[f"token_id:{t}" for t in ids]
        )
        choice = CompletionChoice(
            text="",
            token_ids=ids,
            finish_reason=finish,
            logprobs=logprobs if body.logprobs is not None else None,
        )
        return CompletionResponse(
            model="scripted",
            choices=[choice],
            usage=Usage(
                prompt_tokens=len(prompt),
                completion_tokens=len(ids),
                total_tokens=len(prompt) + len(ids),
            ),
            policy_version=state["version"],
            policy_version_final=state["version"],
        )

    @app.get("/health")
    async def health() -> HealthResponse:
        return HealthResponse(policy_version=state["version"], model="scripted")

    @app.post("/update_weights")
    async def update_weights(body: UpdateWeightsRequest) -> UpdateWeightsResponse:
        state["version"] = body.version
        return UpdateWeightsResponse(policy_version=body.version)

    @app.get("/stats")
    async def stats() -> dict:
        return {
            "completions": state["completions"],
            "policy_version": state["version"],
            "peak_in_flight": load["peak"],
            "cache_salts": salts,
            "paused": load["paused"],
            "resumed": load["resumed"],
        }

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        text = f"swefleet:policy_version {state['version']}\n"
        if kv_capacity:
            usage = min(1.0, load["in_flight"] / kv_capacity)
            text += f'vllm:kv_cache_usage_perc{{engine="0",model_name="scripted"}} {usage}\n'
        return PlainTextResponse(text)

    # ---- vLLM 0.26 dev routes used by the fleet client (server_api="vllm") ----

    @app.post("/pause")
    async def pause(mode: str = "abort") -> dict:
        load["paused"] += 1
        return {"status": "paused", "mode": mode}

    @app.post("/resume")
    async def resume() -> dict:
        load["resumed"] += 1
        return {"status": "resumed"}

    @app.post("/collective_rpc")
    async def collective_rpc(body: dict) -> dict:
        if body.get("method") != "update_weights_from_path":
            return {"results": [None]}
        _path, version = body["args"]
        state["version"] = int(version)
        return {"results": [str(state["version"])]}

    return app


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m inference.scripted_server")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file", default="")
    p.add_argument("--delay-s", type=float, default=0.0)
    p.add_argument("--policy-version", type=int, default=0)
    p.add_argument("--vocab-size", type=int, default=1024)
    p.add_argument("--hang-token", type=int, default=-1,
                   help="requests whose prompt starts with this id never answer (stragglers)")
    p.add_argument("--kv-capacity", type=int, default=0,
                   help="expose vllm:kv_cache_usage_perc = in-flight / this (0: not exposed)")
    args = p.parse_args(argv)
    logging.basicConfig(level="INFO")
    serve(
        create_app(
            args.delay_s, args.policy_version, args.vocab_size, args.hang_token, args.kv_capacity
        ),
        args.host,
        args.port,
        args.port_file,
    )


if __name__ == "__main__":
    main()
