"""OpenAI-compatible HTTP server around the embedded engine (FastAPI + uvicorn).

    python -m swefleet.inference.engine.server --settings '{"model_dir": "DIR", "port": 8000}'

Every setting of the process is one `EngineSettings` JSON document (`inference/engine/settings.py`,
validated here by the same model: a bad one exits 2 with one line); `--port-file F`: write the
bound port to F once serving (`"port": 0` picks a free one). Launchers build the document with
`EngineSettings.from_inference` and `inference.launch.embedded_command`.

Endpoints: POST /v1/completions (vLLM-shaped, `stream: true` too, see `inference/wire.py` and
`inference/engine/stream.py`), POST /v1/chat/completions (the checkpoint's chat template, plain
messages: `inference/engine/chat.py`), GET /v1/models,
POST /tokenize, GET /health (policy_version), GET /metrics (Prometheus text),
POST /update_weights {"path", "version", "abort_in_flight"}; weight sync by broadcast
(`nccl_receiver.py`): GET /get_world_size, POST /init_weight_transfer_engine {"init_info"},
POST /receive_weights {"version", "abort_in_flight", "update_info"}; the in-memory hand-off
(`shared_receiver.py`): POST /load_shared_weights {"version", "abort_in_flight", "marker"}.

Model names, as vLLM: the server serves the names /v1/models lists (`served_model_names`, one
or more; default: the checkpoint directory's name), answers with the first, and refuses any
other `model` of /v1/completions, /v1/chat/completions and /tokenize with 404 NotFoundError;
no `model` (or "") is the served model.

The model runs on the engine's own thread; handlers only wait on futures, so the event loop
stays free. A client that disconnects (e.g. its deadline passed) cancels its sequence, streamed
or not.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from swefleet.inference.engine import chat
from swefleet.inference.engine.core import (
    Engine,
    EngineDead,
    GenerationResult,
    QueueFull,
    SamplingParams,
)
from swefleet.inference.engine.metrics import render
from swefleet.inference.engine.model import LoadedModel
from swefleet.inference.engine.nccl_receiver import (
    InitRequest,
    ReceiveRequest,
    TransferError,
    WeightReceiver,
)
from swefleet.inference.engine.settings import EngineSettings
from swefleet.inference.engine.shared_receiver import SharedReader, SharedRequest
from swefleet.inference.engine.stream import (
    ChunkWriter,
    EngineStreamResponse,
    TokenStream,
    sse_chunks,
)
from swefleet.inference.engine.weights import StagedWeights, read_weights
from swefleet.inference.serving import serve
from swefleet.inference.wire import (
    CompletionChoice,
    CompletionLogProbs,
    CompletionRequest,
    CompletionResponse,
    HealthResponse,
    PromptTokensDetails,
    TokenizeRequest,
    TokenizeResponse,
    UpdateWeightsRequest,
    UpdateWeightsResponse,
    Usage,
)

from swefleet.routed_experts import encode as encode_routed

log = logging.getLogger("swefleet.inference.engine.server")

DISCONNECT_POLL_S = 0.25


class HTTPError(Exception):
    def __init__(self, status: int, message: str, kind: str = "", param: str | None = None):
        super().__init__(message)
        self.status = status
        self.kind = kind
        self.param = param


def _error(status: int, message: str, kind: str = "", param: str | None = None) -> JSONResponse:
    kind = kind or ("BadRequestError" if status < 500 else "ServiceUnavailableError")
    named = {} if param is None else {"param": param}  # the request field at fault
    return JSONResponse({"error": {"message": message, "type": kind, **named, "code": status}},
                        status)


async def _settled(fut: asyncio.Future, request: Request, engine: Engine, seq_id: str) -> Any:
    """Wait for the engine's answer; cancel the sequence if the client goes away."""
    try:
        while True:
            try:
                return await asyncio.wait_for(asyncio.shield(fut), DISCONNECT_POLL_S)
            except TimeoutError:
                if await request.is_disconnected():
                    engine.cancel(seq_id)
                    return await fut
    except asyncio.CancelledError:
        engine.cancel(seq_id)
        raise


def _future_callback(fut: asyncio.Future) -> Any:
    loop = fut.get_loop()

    def settle(value: Any) -> None:
        if not fut.done():
            fut.set_result(value)

    def on_done(value: Any) -> None:
        try:
            loop.call_soon_threadsafe(settle, value)
        except RuntimeError:  # loop closed during shutdown: nobody is waiting
            pass

    return on_done


class Handlers:
    """Request handling that needs the loaded model (tokenizer) and the engine."""

    def __init__(self, loaded: LoadedModel, engine: Engine, served_names: list[str]) -> None:
        self.loaded = loaded
        self.engine = engine
        self.names = served_names
        self.name = served_names[0]
        """The name answers carry (vLLM: the first served name)."""
        self.update_lock = asyncio.Lock()
        self.receiver = WeightReceiver(loaded.model)
        self.shared = SharedReader(loaded.model)

    def check_model(self, model: str | None) -> None:
        """vLLM's check: no model is the served one; an unknown one is 404 NotFoundError."""
        if model and model not in self.names:
            raise HTTPError(404, f"The model `{model}` does not exist.", "NotFoundError", "model")

    def prompt_ids(self, body: CompletionRequest) -> list[int]:
        prompt = body.prompt
        if isinstance(prompt, str):
            if self.loaded.tokenizer is None:
                raise HTTPError(400, "model has no tokenizer: send prompt as token ids")
            return list(self.loaded.tokenizer(prompt)["input_ids"])
        if prompt and all(isinstance(t, int) for t in prompt):
            return list(prompt)
        raise HTTPError(400, "prompt must be one string or one non-empty list of token ids")

    def params(self, body: CompletionRequest) -> SamplingParams:
        if unsupported := body.unsupported():
            raise HTTPError(400, f"not supported by the embedded engine: {unsupported}")
        if body.stream_options is not None and not body.stream:
            raise HTTPError(400, "Stream options can only be defined when `stream=True`.")
        return SamplingParams(
            max_tokens=body.max_tokens,
            temperature=1.0 if body.temperature is None else body.temperature,
            top_p=1.0 if body.top_p is None else body.top_p,
            seed=body.seed,
            stop_ids=frozenset(body.stop_token_ids or ()),
            ignore_eos=body.ignore_eos,
            top_logprobs=body.logprobs or 0,
        )

    async def complete(self, body: CompletionRequest, request: Request) -> CompletionResponse:
        self.check_model(body.model)
        prompt_ids, params = self.prompt_ids(body), self.params(body)
        result = await self.generate(prompt_ids, params, request)
        return self.response(body, prompt_ids, result)

    async def chat(self, body: chat.ChatCompletionRequest, request: Request) -> dict:
        """One assistant reply to `body.messages` (`chat.py`): the checkpoint's chat template,
        then the same generation as /v1/completions."""
        self.check_model(body.model)
        try:
            prompt_ids = chat.prompt_ids(self.loaded.tokenizer, body)
        except chat.ChatRequestError as exc:
            raise HTTPError(400, str(exc)) from exc
        completion = chat.completion_request(body, prompt_ids, self.loaded.max_model_len)
        result = await self.generate(prompt_ids, self.params(completion), request)
        return chat.answer(body, prompt_ids, result, self.loaded.tokenizer, self.name)

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, request: Request
    ) -> GenerationResult:
        """Submit one sequence and wait for its result (cancelled if the client goes away)."""
        fut = asyncio.get_running_loop().create_future()
        try:
            seq_id = self.engine.submit(prompt_ids, params, _future_callback(fut))
        except ValueError as exc:
            raise HTTPError(400, str(exc)) from exc
        except (QueueFull, EngineDead) as exc:
            raise HTTPError(503, str(exc)) from exc
        result = await _settled(fut, request, self.engine, seq_id)
        if isinstance(result, BaseException):
            raise HTTPError(503, str(result))
        return result

    def stream(self, body: CompletionRequest) -> EngineStreamResponse:
        """Submit with a per-token callback and answer Server-Sent Events; errors before the
        first byte (bad request, queue full) are plain HTTP errors as without streaming."""
        self.check_model(body.model)
        prompt_ids, params = self.prompt_ids(body), self.params(body)
        stream = TokenStream(asyncio.get_running_loop())
        try:
            seq_id = self.engine.submit(prompt_ids, params, stream.done, stream.push)
        except ValueError as exc:
            raise HTTPError(400, str(exc)) from exc
        except (QueueFull, EngineDead) as exc:
            raise HTTPError(503, str(exc)) from exc
        writer = ChunkWriter(body, prompt_ids, self.name, self.loaded.tokenizer, self.token_str)

        def on_close() -> None:
            if not stream.finished:  # the client went away (or the server stops): free the slot
                self.engine.cancel(seq_id)

        return EngineStreamResponse(sse_chunks(stream, writer), on_close)

    def token_str(self, token: int) -> str:
        tok = self.loaded.tokenizer
        return f"token_id:{token}" if tok is None else tok.decode([token])

    def response(
        self, body: CompletionRequest, prompt_ids: list[int], r: GenerationResult
    ) -> CompletionResponse:
        tok = self.loaded.tokenizer
        text = (
            ""
            if tok is None
            else tok.decode(r.token_ids, skip_special_tokens=body.skip_special_tokens)
        )
        logprobs = None
        if body.logprobs is not None:
            tokens = [self.token_str(t) for t in r.token_ids]
            offsets, pos = [], 0
            for s in tokens:
                offsets.append(pos)
                pos += len(s)
            top = None
            if body.logprobs:
                top = [
                    {self.token_str(t): lp for t, lp in [*alts, (tid, lp_tid)]}
                    for alts, tid, lp_tid in zip(
                        r.top_logprobs, r.token_ids, r.logprobs, strict=True
                    )
                ]
            logprobs = CompletionLogProbs(
                text_offset=offsets,
                token_logprobs=r.logprobs,
                tokens=tokens,
                top_logprobs=top or [None] * len(tokens),
            )
        choice = CompletionChoice(
            text=text,
            logprobs=logprobs,
            finish_reason=r.finish_reason,
            stop_reason=r.stop_reason,
            token_ids=r.token_ids,
            prompt_token_ids=prompt_ids if body.return_token_ids else None,
            routed_experts=None if r.routed_experts is None else encode_routed(r.routed_experts),
        )
        n_out = len(r.token_ids)
        return CompletionResponse(
            model=self.name,
            choices=[choice],
            usage=Usage(
                prompt_tokens=r.prompt_len,
                completion_tokens=n_out,
                total_tokens=r.prompt_len + n_out,
                prompt_tokens_details=PromptTokensDetails(cached_tokens=r.cached_tokens),
            ),
            policy_version=r.policy_version,
            policy_version_final=r.policy_version_final,
            abort_reason=r.abort_reason,
        )

    async def update_weights(self, body: UpdateWeightsRequest) -> UpdateWeightsResponse:
        async with self.update_lock:
            try:
                staged = await asyncio.to_thread(read_weights, self.loaded.model, body.path)
            except (FileNotFoundError, ValueError) as exc:
                raise HTTPError(400, f"cannot load weights: {exc}") from exc
            return await self._apply(staged, body.version, body.abort_in_flight)

    async def init_transfer(self, body: InitRequest) -> dict:
        """Join the trainer's weight-transfer group (idempotent); 504 when it does not form."""
        try:
            joined = await asyncio.to_thread(self.receiver.join, body.init_info)
        except TransferError as exc:
            raise HTTPError(504, str(exc)) from exc
        return {"message": "Weight transfer initialized", "joined": joined}

    async def receive_weights(self, body: ReceiveRequest) -> UpdateWeightsResponse:
        """Receive the trainer's broadcast of `version`, then apply it as a path update."""
        async with self.update_lock:
            try:
                self.receiver.check(body.update_info)
                staged = await asyncio.to_thread(self.receiver.receive, body.update_info)
            except ValueError as exc:
                raise HTTPError(400, f"cannot receive weights: {exc}") from exc
            except TransferError as exc:
                raise HTTPError(504, str(exc)) from exc
            return await self._apply(staged, body.version, body.abort_in_flight)

    async def load_shared(self, body: SharedRequest) -> UpdateWeightsResponse:
        """Copy the version in the trainer's shared buffer, then serve it."""
        async with self.update_lock:
            try:
                staged = await asyncio.to_thread(self.shared.stage, body.marker)
            except (FileNotFoundError, ValueError, RuntimeError) as exc:
                raise HTTPError(400, f"cannot load shared weights: {exc}") from exc
            return await self._apply(staged, body.version, body.abort_in_flight)

    async def _apply(
        self, staged: StagedWeights, version: int, abort: bool
    ) -> UpdateWeightsResponse:
        """Copy staged weights in on the engine thread and serve `version`."""
        fut = asyncio.get_running_loop().create_future()
        try:
            self.engine.update_weights(staged, version, abort, _future_callback(fut))
        except EngineDead as exc:
            raise HTTPError(503, str(exc)) from exc
        result = await fut
        if isinstance(result, BaseException):
            raise HTTPError(503, str(result))
        steps = result.decode_steps or 1
        log.info("serving policy version %d (aborted %d; since the last update: %d decode steps, "
                 "mean batch %.1f, mean longest row %.0f, %d prefill rounds)",
                 result.policy_version, result.aborted, result.decode_steps,
                 result.decode_rows / steps, result.longest_row_sum / steps, result.prefill_rounds)
        return UpdateWeightsResponse(
            policy_version=result.policy_version,
            aborted=result.aborted,
            load_s=staged.load_s,
            apply_s=result.apply_s,
        )

def create_app(
    loaded: LoadedModel, engine: Engine, served_names: str | list[str] = ""
) -> FastAPI:
    """The FastAPI app; the caller owns the engine (started before, shut down after).
    `served_names`: the model name(s) served (empty: the checkpoint directory's name)."""
    names = [served_names] if isinstance(served_names, str) else list(served_names)
    names = [n for n in names if n] or [loaded.name]
    h = Handlers(loaded, engine, names)
    app = FastAPI(title="swefleet embedded engine")

    @app.exception_handler(HTTPError)
    async def _http_error(_: Request, exc: HTTPError) -> JSONResponse:
        return _error(exc.status, str(exc), exc.kind, exc.param)

    @app.exception_handler(RequestValidationError)
    async def _bad_request(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _error(400, str(exc.errors()))

    @app.post("/v1/completions", response_model=CompletionResponse)
    async def completions(body: CompletionRequest, request: Request) -> Any:
        if body.stream:
            return h.stream(body)
        return await h.complete(body, request)

    @app.post("/v1/chat/completions")
    async def chat_completions(body: chat.ChatCompletionRequest, request: Request) -> Any:
        return await h.chat(body, request)

    @app.get("/health")
    async def health() -> Any:
        if not engine.alive:
            return _error(503, f"engine not running: {engine.error!r}")
        return HealthResponse(policy_version=engine.policy_version, model=h.name)

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(render(engine, h.name), media_type="text/plain; version=0.0.4")

    @app.post("/update_weights")
    async def update_weights(body: UpdateWeightsRequest) -> UpdateWeightsResponse:
        return await h.update_weights(body)

    # weight sync by broadcast (nccl_receiver.py): vLLM's route names where they exist
    @app.get("/get_world_size")
    async def get_world_size() -> dict:
        return {"world_size": 1}

    @app.post("/init_weight_transfer_engine")
    async def init_weight_transfer_engine(body: InitRequest) -> dict:
        return await h.init_transfer(body)

    @app.post("/receive_weights")
    async def receive_weights(body: ReceiveRequest) -> UpdateWeightsResponse:
        return await h.receive_weights(body)

    @app.post("/load_shared_weights")
    async def load_shared_weights(body: SharedRequest) -> UpdateWeightsResponse:
        return await h.load_shared(body)

    @app.post("/tokenize")
    async def tokenize(body: TokenizeRequest) -> TokenizeResponse:
        h.check_model(body.model)
        if loaded.tokenizer is None:
            raise HTTPError(400, "model has no tokenizer")
        ids = loaded.tokenizer(body.prompt, add_special_tokens=body.add_special_tokens)["input_ids"]
        return TokenizeResponse(count=len(ids), max_model_len=loaded.max_model_len, tokens=ids)

    @app.get("/v1/models")
    async def models() -> dict:
        cards = [
            {"id": name, "object": "model", "owned_by": "swefleet",
             "max_model_len": loaded.max_model_len}
            for name in h.names
        ]
        return {"object": "list", "data": cards}

    return app


def _parse(argv: list[str] | None) -> tuple[EngineSettings, str]:
    """The settings document and the port file; a bad document exits 2 with one line."""
    p = argparse.ArgumentParser(
        prog="python -m swefleet.inference.engine.server",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument(
        "--settings",
        required=True,
        help="the server's EngineSettings as one JSON document (inference/engine/settings.py)",
    )
    p.add_argument("--port-file", default="", help="write the bound port here once serving")
    args = p.parse_args(argv)
    try:
        return EngineSettings.from_json(args.settings), args.port_file
    except ValueError as exc:
        p.exit(2, f"{p.prog}: error: {exc}\n")


def build_engine(loaded: LoadedModel, settings: EngineSettings) -> Engine:
    """The engine of `settings` over the loaded model (not started)."""
    return Engine(
        loaded.model,
        loaded.eos_ids,
        max_model_len=loaded.max_model_len,
        max_batch_size=settings.max_batch_size,
        max_queue=settings.max_queue,
        policy_version=settings.policy_version,
        kv_mode=settings.kv_mode,
        kv_capacity=settings.kv_capacity,
        cuda_graphs=settings.cuda_graphs,
        prefix_cache=settings.prefix_cache,
        prefix_cache_bytes=int(settings.prefix_cache_mb * (1 << 20)),
        routed_experts=settings.routed_experts,
        gpu_memory_fraction=settings.gpu_memory_fraction,
    )


def main(argv: list[str] | None = None) -> None:
    settings, port_file = _parse(argv)
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    run(settings, port_file)


def run(
    settings: EngineSettings,
    port_file: str = "",
    on_bound: Callable[[int], None] | None = None,
) -> None:
    """Load the model of `settings`, start its engine and serve it until SIGINT/SIGTERM;
    `on_bound(port)` once the socket listens (`swefleet serve` prints its URL there)."""
    from swefleet.inference.engine.model import load_model

    if settings.threads:
        import torch

        torch.set_num_threads(settings.threads)
    loaded = load_model(settings.model_dir, device=settings.device, dtype=settings.dtype)
    engine = build_engine(loaded, settings)
    loaded.max_model_len = engine.max_model_len
    engine.start()
    app = create_app(loaded, engine, settings.served_model_names)
    log.info("serving %s on %s:%d", settings.model_dir, settings.host, settings.port)
    try:
        serve(app, settings.host, settings.port, port_file, on_bound)
    finally:
        engine.shutdown()


if __name__ == "__main__":
    main()
