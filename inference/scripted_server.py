"""A deterministic OpenAI-compatible server with no model, for fleet tests and benchmarks.

    python -m inference.scripted_server --port 0 --port-file F [--delay-s 0] [--policy-version 0]

It speaks the same wire schemas as the embedded engine (`inference/wire.py`): completion token
`i` is `(last prompt id + i + 1) % vocab_size` with logprob -0.5, finish_reason `length` (or
`stop` on a `stop_token_ids` hit). `/update_weights` only records the version; `/stats` counts
completions so tests can prove a request was (not) retried.
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
    delay_s: float = 0.0, policy_version: int = 0, vocab_size: int = 1024, hang_token: int = -1
) -> FastAPI:
    app = FastAPI(title="swefleet scripted server")
    state = {"version": policy_version, "completions": 0, "delay_s": delay_s}

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest) -> CompletionResponse:
        if state["delay_s"]:
            await asyncio.sleep(state["delay_s"])
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
        return {"completions": state["completions"], "policy_version": state["version"]}

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(f"swefleet:policy_version {state['version']}\n")

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
    args = p.parse_args(argv)
    logging.basicConfig(level="INFO")
    serve(
        create_app(args.delay_s, args.policy_version, args.vocab_size, args.hang_token),
        args.host,
        args.port,
        args.port_file,
    )


if __name__ == "__main__":
    main()
