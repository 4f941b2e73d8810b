"""A deterministic OpenAI-compatible server with no model, for fleet tests and benchmarks.

    python -m swefleet.inference.scripted_server --port 0 --port-file F [--delay-s 0] [--policy-version 0]

It speaks the same wire schemas as the embedded engine (`inference/wire.py`): completion token
`i` is `(last prompt id + i + 1) % vocab_size` with logprob -0.5, finish_reason `length` (or
`stop` on a `stop_token_ids` hit). `/update_weights` only records the version; `/stats` counts
completions so tests can prove a request was (not) retried, and records the peak of requests in
flight and the `cache_salt`s seen.

`stream: true` answers Server-Sent Events shaped as the embedded engine's (`inference/wire.py`):
one chunk per token (`--token-delay-s` apart), the last with `finish_reason` and the swefleet
extras, a usage chunk with `stream_options.include_usage`, `data: [DONE]`; a `--hang-token`
request then sends its headers and never a token.

With `--served-model-name NAME`, GET /v1/models lists NAME (vLLM's readiness route; tests of
launched "vLLM" servers). With `--kv-capacity N` `/metrics` also exposes vLLM's `vllm:kv_cache_usage_perc` as
min(1, requests in flight / N), for the fleet's adaptive concurrency. vLLM 0.26's dev routes
used for weight updates are emulated: `/pause`, `/resume`, and `/collective_rpc` with method
`update_weights_from_path` (args `[path, version]`; answers `{"results": ["<version>"]}`), and
the routes of vLLM's weight-transfer engine (`GET /get_world_size`, `POST
/init_weight_transfer_engine`, `/start_weight_update`, `/update_weights {"update_info"}`,
`/finish_weight_update`: bodies and call order checked as vLLM does, nothing received; `GET
/weight_transfer` lists the calls, pause/resume included, in order).

With `--prefix-cache`, a prefix cache is emulated (16-token blocks, keyed by `cache_salt`) and
`/metrics` exposes vLLM 0.26's counters `vllm:prefix_cache_queries_total` and
`vllm:prefix_cache_hits_total` (prompt tokens queried / found cached).

Disaggregated prefill/decode with vLLM's NixlConnector is emulated by `--role`:

- `prefill`: a request must carry `kv_transfer_params.do_remote_decode`; the server keeps the
  prompt ("KV blocks") under the request id (`X-Request-Id` header) and answers one token plus
  `kv_transfer_params` shaped as 0.26.0's `NixlConnectorScheduler.request_finished` returns them
  (`remote_port` is this server's HTTP port: the emulated NIXL side channel);
- `decode`: a request must carry the prefill answer's `kv_transfer_params`
  (`do_remote_prefill: true`); the server pulls the blocks from `GET
  {remote_host}:{remote_port}/kv/{remote_request_id}` (once, as NIXL frees them after the read)
  and checks they hold exactly its prompt (400 otherwise, 502 when the pull fails).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import uuid
from collections.abc import AsyncIterator
from typing import Any

import httpx
from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import PlainTextResponse, StreamingResponse
from pydantic import ValidationError
from swefleet.inference.serving import serve
from swefleet.inference.wire import (
    CompletionChoice,
    CompletionLogProbs,
    CompletionRequest,
    CompletionResponse,
    CompletionStreamChoice,
    CompletionStreamResponse,
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


BLOCK = 16
#: most tokens (prompt + max_tokens) of one request, as an engine's max_model_len
MAX_MODEL_LEN = 131072


def prompt_ids(body: CompletionRequest) -> list[int]:
    """The prompt's ids (a string's: its code points); 400 when it is empty, a batch, or too
    long with its `max_tokens` (a huge `max_tokens` would stall the server, as one engine step)."""
    prompt = body.prompt if isinstance(body.prompt, list) else [ord(c) for c in body.prompt]
    if not prompt or not all(isinstance(t, int) for t in prompt):
        raise HTTPException(400, "prompt must be one string or one non-empty list of token ids")
    if len(prompt) + body.max_tokens > MAX_MODEL_LEN:
        raise HTTPException(
            400,
            f"prompt ({len(prompt)} tokens) + max_tokens ({body.max_tokens}) exceeds "
            f"max_model_len {MAX_MODEL_LEN}",
        )
    return prompt


async def stream_events(
    body: CompletionRequest, answer: CompletionResponse, token_delay_s: float, hang: bool
) -> AsyncIterator[bytes]:
    """`answer` as a vLLM-shaped SSE stream: one chunk per token, extras on the last one."""
    if hang:
        await asyncio.sleep(24 * 3600)
    full = answer.choices[0]
    deltas = [[token] for token in full.token_ids or ()] or [[]]  # max_tokens 0: one empty chunk
    for i, delta in enumerate(deltas):
        if token_delay_s and i:
            await asyncio.sleep(token_delay_s)
        last = i == len(deltas) - 1
        logprobs = None
        if full.logprobs is not None:
            logprobs = CompletionLogProbs(
                text_offset=[0] * len(delta),
                token_logprobs=[-0.5] * len(delta),
                tokens=[f"token_id:{t}" for t in delta],
                top_logprobs=[None] * len(delta),
            )
        choice = CompletionStreamChoice(
            index=0,
            text="",
            logprobs=logprobs,
            finish_reason=full.finish_reason if last else None,
            stop_reason=None,
            prompt_token_ids=None,
            token_ids=delta,
        )
        chunk = CompletionStreamResponse(
            id=answer.id,
            object="text_completion",
            created=answer.created,
            model=answer.model,
            choices=[choice],
        )
        if last:
            chunk.policy_version = answer.policy_version
            chunk.policy_version_final = answer.policy_version_final
            chunk.usage = answer.usage
        yield b"data: " + chunk.model_dump_json(exclude_unset=True).encode() + b"\n\n"
    if body.stream_options and body.stream_options.include_usage:
        usage = CompletionStreamResponse(
            id=answer.id,
            created=answer.created,
            model=answer.model,
            choices=[],
            usage=answer.usage,
        )
        yield b"data: " + usage.model_dump_json(exclude_none=True).encode() + b"\n\n"
    yield b"data: [DONE]\n\n"


class PrefixCache:
    """Emulated prefix cache: full 16-token blocks of prompts seen before, per `cache_salt`."""

    def __init__(self) -> None:
        self.blocks: set[int] = set()
        self.queries = 0
        self.hits = 0

    def lookup(self, salt: str | None, prompt: list[int]) -> None:
        """Count the prompt's tokens as queried and its cached leading blocks as hits."""
        self.queries += len(prompt)
        key, cached = hash(salt), True
        for start in range(0, len(prompt) - BLOCK + 1, BLOCK):
            key = hash((key, tuple(prompt[start : start + BLOCK])))
            if cached and key in self.blocks:
                self.hits += BLOCK
            else:
                cached = False
                self.blocks.add(key)


def prefill_params_answer(request: Request, request_id: str, prompt: list[int]) -> dict:
    """`kv_transfer_params` of a prefill answer, as vLLM 0.26.0's NIXL scheduler builds them."""
    host, port = request.scope["server"]
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_block_ids": [list(range(-(-len(prompt) // BLOCK)))],
        "remote_engine_id": f"scripted-{port}",
        "remote_request_id": request_id,
        "remote_host": host,
        "remote_port": port,
        "tp_size": 1,
        "remote_num_tokens": len(prompt),
        "remote_blocks_expiry_time": None,
    }


async def pull_blocks(params: dict, prompt: list[int]) -> None:
    """The decode side's "NIXL read": fetch the prefilled prompt and check it is ours."""
    url = f"http://{params['remote_host']}:{params['remote_port']}/kv/{params['remote_request_id']}"
    try:
        async with httpx.AsyncClient(trust_env=False, timeout=5.0) as client:
            resp = await client.get(url)
    except httpx.HTTPError as exc:
        raise HTTPException(502, f"KV pull from {url} failed: {exc!r}") from exc
    if resp.status_code != 200:
        raise HTTPException(502, f"KV pull from {url}: HTTP {resp.status_code}")
    if resp.json()["prompt"] != prompt or params.get("remote_num_tokens") != len(prompt):
        raise HTTPException(400, "pulled KV blocks do not match this request's prompt")


#: vLLM 0.26.0's NCCLWeightTransferInitInfo / NCCLWeightTransferUpdateInfo fields
#: (vllm/distributed/weight_transfer/nccl_common.py, nccl_engine.py): it refuses others
INIT_INFO_FIELDS = {"master_address", "master_port", "rank_offset", "world_size"}
UPDATE_INFO_REQUIRED = {"names", "dtype_names", "shapes"}
UPDATE_INFO_FIELDS = UPDATE_INFO_REQUIRED | {
    "packed", "packed_buffer_size_bytes", "packed_num_buffers"}


def _check_fields(what: str, info: Any, allowed: set[str], required: set[str]) -> None:
    """vLLM builds the dataclass from the dict: an unknown or a missing field fails."""
    fields = set(info) if isinstance(info, dict) else set()
    if not isinstance(info, dict) or fields - allowed or required - fields:
        raise HTTPException(500, f"Invalid {what}: fields {sorted(fields)}, expected "
                                 f"{sorted(allowed)}")


def create_app(
    delay_s: float = 0.0,
    policy_version: int = 0,
    vocab_size: int = 1024,
    hang_token: int = -1,
    kv_capacity: int = 0,
    role: str = "both",
    prefix_cache: bool = False,
    token_delay_s: float = 0.0,
    served_model_name: str = "",
    world_size: int = 1,
) -> FastAPI:
    app = FastAPI(title="swefleet scripted server")
    state = {"version": policy_version, "completions": 0, "delay_s": delay_s}
    load = {"in_flight": 0, "peak": 0, "paused": 0, "resumed": 0}
    salts: dict[str, int] = {}
    transfer_calls: list[str] = []
    cache = PrefixCache() if prefix_cache else None
    kv = {"held": {}, "prefills": 0, "pulls": 0, "decodes": 0, "last_params": None}

    async def disaggregated(body: CompletionRequest, request: Request, prompt: list[int]) -> dict:
        """The phase checks of `--role`; returns the prefill answer's `kv_transfer_params`."""
        params = body.kv_transfer_params or {}
        if role == "prefill":
            if not params.get("do_remote_decode"):
                raise HTTPException(400, "prefill server: kv_transfer_params.do_remote_decode")
            request_id = request.headers.get("X-Request-Id") or f"cmpl-{uuid.uuid4().hex}"
            kv["held"][request_id] = prompt
            kv["prefills"] += 1
            return prefill_params_answer(request, request_id, prompt)
        if not params.get("do_remote_prefill"):
            raise HTTPException(400, "decode server: no kv_transfer_params from a prefill")
        await pull_blocks(params, prompt)
        kv["pulls"] += 1
        kv["decodes"] += 1
        kv["last_params"] = params
        return {}

    @app.get("/kv/{request_id}")
    async def kv_blocks(request_id: str) -> dict:
        if request_id not in kv["held"]:
            raise HTTPException(404, f"no KV blocks held for {request_id}")
        return {"prompt": kv["held"].pop(request_id)}

    @app.post("/v1/completions", response_model=CompletionResponse)
    async def completions(body: CompletionRequest, request: Request) -> Any:
        prompt = prompt_ids(body)
        if body.cache_salt is not None:
            salts[body.cache_salt] = salts.get(body.cache_salt, 0) + 1
        load["in_flight"] += 1
        load["peak"] = max(load["peak"], load["in_flight"])
        try:
            if state["delay_s"]:
                await asyncio.sleep(state["delay_s"])
        finally:
            load["in_flight"] -= 1
        hang = hang_token >= 0 and prompt[0] == hang_token
        if hang and not body.stream:
            await asyncio.sleep(24 * 3600)  # a hung request: only the client's deadline ends it
        transfer = await disaggregated(body, request, prompt) if role != "both" else {}
        if cache is not None and role != "decode":  # a decode server pulls, it does not look up
            cache.lookup(body.cache_salt, prompt)
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
        answer = CompletionResponse(
            model="scripted",
            choices=[choice],
            usage=Usage(
                prompt_tokens=len(prompt),
                completion_tokens=len(ids),
                total_tokens=len(prompt) + len(ids),
            ),
            policy_version=state["version"],
            policy_version_final=state["version"],
            kv_transfer_params=transfer or None,
        )
        if body.stream:
            events = stream_events(body, answer, token_delay_s, hang)
            return StreamingResponse(events, media_type="text/event-stream")
        return answer

    @app.get("/health")
    async def health() -> HealthResponse:
        return HealthResponse(policy_version=state["version"], model="scripted")

    @app.post("/update_weights")
    async def update_weights(body: dict) -> Any:
        if "update_info" in body:  # vLLM's weight-transfer route (below)
            return transfer_update(body)
        try:
            request = UpdateWeightsRequest.model_validate(body)
        except ValidationError as exc:
            raise HTTPException(400, str(exc.errors())) from exc
        state["version"] = request.version
        return UpdateWeightsResponse(policy_version=request.version)

    @app.get("/stats")
    async def stats() -> dict:
        return {
            "completions": state["completions"],
            "policy_version": state["version"],
            "peak_in_flight": load["peak"],
            "cache_salts": salts,
            "paused": load["paused"],
            "resumed": load["resumed"],
            "role": role,
            "prefills": kv["prefills"],
            "kv_pulls": kv["pulls"],
            "kv_held": len(kv["held"]),
            "last_kv_transfer_params": kv["last_params"],
        }

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        text = f"swefleet:policy_version {state['version']}\n"
        if kv_capacity:
            usage = min(1.0, load["in_flight"] / kv_capacity)
            text += f'vllm:kv_cache_usage_perc{{engine="0",model_name="scripted"}} {usage}\n'
        if cache is not None:
            labels = '{engine="0",model_name="scripted"}'
            text += f"vllm:prefix_cache_queries_total{labels} {float(cache.queries)}\n"
            text += f"vllm:prefix_cache_hits_total{labels} {float(cache.hits)}\n"
        return PlainTextResponse(text)

    if served_model_name:

        @app.get("/v1/models")
        async def models() -> dict:
            card = {"id": served_model_name, "object": "model", "max_model_len": MAX_MODEL_LEN}
            return {"object": "list", "data": [card]}

    # ---- vLLM 0.26 dev routes used by the fleet client (server_api="vllm") ----

    @app.post("/pause")
    async def pause(mode: str = "abort") -> dict:
        load["paused"] += 1
        transfer_calls.append(f"pause?mode={mode}")
        return {"status": "paused", "mode": mode}

    @app.post("/resume")
    async def resume() -> dict:
        load["resumed"] += 1
        transfer_calls.append("resume")
        return {"status": "resumed"}

    # vLLM 0.26's weight-transfer engine routes (--weight-transfer-config, NCCL backend):
    # bodies checked as vllm/entrypoints/serve/dev/rlhf/api_router.py and the worker check them;
    # nothing is received (no group is joined); the calls are recorded in order in /stats
    transfer: dict[str, Any] = {"init_info": None, "session": False, "update_info": None}

    def transfer_call(name: str, *, needs_init: bool = True) -> None:
        transfer_calls.append(name)
        if needs_init and transfer["init_info"] is None:
            raise HTTPException(500, "NCCL weight transfer not initialized. "
                                     "Call init_transfer_engine() first.")

    def transfer_update(body: dict) -> dict:
        transfer_call("update_weights")
        info = body["update_info"]
        _check_fields("update_info", info, UPDATE_INFO_FIELDS, UPDATE_INFO_REQUIRED)
        if not transfer["session"]:
            raise HTTPException(500, "start_weight_update must be called before update_weights.")
        if not len(info["names"]) == len(info["dtype_names"]) == len(info["shapes"]):
            raise HTTPException(500, "`dtype_names` and `shapes` should be of the same size as "
                                     "`names`")
        transfer["update_info"] = info
        return {"message": "Weights updated"}

    @app.get("/get_world_size")
    async def get_world_size(include_dp: bool = True) -> dict:
        return {"world_size": world_size}

    @app.post("/init_weight_transfer_engine")
    async def init_weight_transfer_engine(body: dict) -> dict:
        transfer_call("init_weight_transfer_engine", needs_init=False)
        info = body.get("init_info")
        if info is None:
            raise HTTPException(400, "Missing 'init_info' in request body")
        _check_fields("init_info", info, INIT_INFO_FIELDS, INIT_INFO_FIELDS)
        transfer["init_info"] = info
        return {"message": "Weight transfer initialized"}

    def switch_session(name: str, active: bool, error: str) -> None:
        """start (`active`) or finish an update session; vLLM's 500 when it already is so."""
        transfer_call(name)
        if transfer["session"] == active:
            raise HTTPException(500, error)
        transfer["session"] = active

    @app.post("/start_weight_update")
    async def start_weight_update() -> dict:
        switch_session("start_weight_update", True, "start_weight_update called while a weight "
                       "update is already active. Call finish_weight_update first.")
        return {"message": "Weight update started"}

    @app.post("/finish_weight_update")
    async def finish_weight_update() -> dict:
        switch_session("finish_weight_update", False, "finish_weight_update called without a "
                       "matching start_weight_update.")
        return {"message": "Weight update finished"}

    @app.get("/weight_transfer")
    async def weight_transfer_state() -> dict:
        """(test seam) The emulated engine's state and the calls so far, in order."""
        return {**transfer, "calls": transfer_calls}

    @app.post("/collective_rpc")
    async def collective_rpc(body: dict) -> dict:
        if body.get("method") != "update_weights_from_path":
            return {"results": [None]}
        _path, version = body["args"]
        state["version"] = int(version)
        return {"results": [str(state["version"])]}

    return app


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m swefleet.inference.scripted_server")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--port-file", default="")
    p.add_argument("--delay-s", type=float, default=0.0)
    p.add_argument("--policy-version", type=int, default=0)
    p.add_argument("--vocab-size", type=int, default=1024)
    p.add_argument(
        "--hang-token",
        type=int,
        default=-1,
        help="requests whose prompt starts with this id never answer (stragglers)",
    )
    p.add_argument(
        "--token-delay-s", type=float, default=0.0, help="streamed answers: seconds per token"
    )
    p.add_argument(
        "--kv-capacity",
        type=int,
        default=0,
        help="expose vllm:kv_cache_usage_perc = in-flight / this (0: not exposed)",
    )
    p.add_argument(
        "--role",
        choices=["both", "prefill", "decode"],
        default="both",
        help="disaggregated serving: emulate a NIXL prefill or decode server",
    )
    p.add_argument(
        "--prefix-cache",
        action="store_true",
        help="emulate a prefix cache and expose vllm:prefix_cache_{queries,hits}_total",
    )
    p.add_argument(
        "--served-model-name",
        default="",
        help="list this model on GET /v1/models (as vLLM; requests are not checked against it)",
    )
    p.add_argument(
        "--world-size",
        type=int,
        default=1,
        help="workers the emulated vLLM reports on GET /get_world_size (weight transfer)",
    )
    args = p.parse_args(argv)
    logging.basicConfig(level="INFO")
    serve(
        create_app(
            args.delay_s,
            args.policy_version,
            args.vocab_size,
            args.hang_token,
            args.kv_capacity,
            args.role,
            args.prefix_cache,
            args.token_delay_s,
            args.served_model_name,
            args.world_size,
        ),
        args.host,
        args.port,
        args.port_file,
    )


if __name__ == "__main__":
    main()
