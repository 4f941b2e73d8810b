"""Streamed completions of the embedded engine: tokens from the engine thread to SSE chunks.

`TokenStream` takes the engine's per-token callback (generation thread) and wakes the event loop
at most once per batch of tokens: one `call_soon_threadsafe` while a wake-up is pending, so a
reader that lags gets several tokens per chunk, as vLLM's output collector merges deltas. The
tokens that end a sequence come with its result, so the last chunk holds them together with
`finish_reason`, as vLLM's does.
`sse_chunks` turns those batches into vLLM 0.26.0-shaped `data: {...}` events (`inference/wire.py`
documents the fields). `EngineStreamResponse` cancels the engine sequence when the response ends
before the sequence did (client disconnect: starlette cancels the body iterator).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
from starlette.responses import StreamingResponse
from swefleet.inference.engine.core import GenerationResult
from swefleet.inference.wire import (
    CompletionLogProbs,
    CompletionRequest,
    CompletionStreamChoice,
    CompletionStreamResponse,
    PromptTokensDetails,
    Usage,
)

from swefleet.routed_experts import encode as encode_routed

Token = tuple[int, float, list[tuple[int, float]] | None]
DONE = b"data: [DONE]\n\n"


class TokenStream:
    """Tokens of one sequence handed from the engine thread to one asyncio reader."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._tokens: deque[Token] = deque()
        self._wake = asyncio.Event()
        self._pending = False
        self._seen = 0
        self.result: GenerationResult | BaseException | None = None

    # ---- generation thread ----

    def push(self, token: int, logprob: float, top: list[tuple[int, float]] | None) -> None:
        self._tokens.append((token, logprob, top))
        self._schedule()

    def done(self, result: GenerationResult | BaseException) -> None:
        self.result = result
        self._schedule()

    def _schedule(self) -> None:
        if self._pending:
            return
        self._pending = True
        try:
            self._loop.call_soon_threadsafe(self._woken)
        except RuntimeError:  # loop closed during shutdown: nobody is reading
            pass

    # ---- event loop ----

    def _woken(self) -> None:
        self._pending = False
        self._wake.set()

    @property
    def finished(self) -> bool:
        return self.result is not None

    async def batches(self) -> AsyncIterator[tuple[list[Token], Any]]:
        """(new tokens, None) while running; the last batch comes with the engine's result."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            result = self.result  # read before draining: every token pushed before it is there
            tokens = [self._tokens.popleft() for _ in range(len(self._tokens))]
            self._seen += len(tokens)
            if isinstance(result, GenerationResult):  # its last tokens were never pushed
                tokens += self._tail(result)
            if tokens or result is not None:
                yield tokens, result
            if result is not None:
                return

    def _tail(self, r: GenerationResult) -> list[Token]:
        n = self._seen
        tops = r.top_logprobs[n:] if r.top_logprobs else [None] * (len(r.token_ids) - n)
        self._seen = len(r.token_ids)
        return list(zip(r.token_ids[n:], r.logprobs[n:], tops, strict=True))


class Detokenizer:
    """Incremental decoding (the prefix/read-offset scheme of vLLM and TGI): a delta is released
    once it does not end in an incomplete UTF-8 sequence; the last delta makes the streamed text
    equal to decoding all ids at once."""

    def __init__(self, tokenizer: Any, skip_special_tokens: bool) -> None:
        self.tok = tokenizer
        self.skip = skip_special_tokens
        self.ids: list[int] = []
        self.prefix = self.read = 0
        self.text_len = 0
        self._emitted: list[str] = []

    def _decode(self, ids: list[int]) -> str:
        return self.tok.decode(ids, skip_special_tokens=self.skip)

    def add(self, ids: list[int]) -> str:
        self.ids += ids
        if self.tok is None:
            return ""
        before = self._decode(self.ids[self.prefix : self.read])
        after = self._decode(self.ids[self.prefix :])
        if len(after) <= len(before) or after.endswith("\ufffd"):
            return ""
        self.prefix, self.read = self.read, len(self.ids)
        return self._out(after[len(before) :])

    def flush(self) -> str:
        """The rest of the text: decode(all ids) minus what was streamed."""
        if self.tok is None:
            return ""
        full = self._decode(self.ids)
        return self._out(full[self.text_len :])

    def _out(self, delta: str) -> str:
        self.text_len += len(delta)
        return delta


class ChunkWriter:
    """Builds the `data:` events of one streamed completion."""

    def __init__(
        self,
        body: CompletionRequest,
        prompt_ids: list[int],
        model: str,
        tokenizer: Any,
        token_str: Callable[[int], str],
    ) -> None:
        self.body = body
        self.prompt_ids = prompt_ids
        self.model = model
        self.token_str = token_str
        self.id = f"cmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.detok = Detokenizer(tokenizer, body.skip_special_tokens)
        self.n_out = 0
        self.first = True
        options = body.stream_options
        self.include_usage = bool(options and options.include_usage)
        self.continuous = self.include_usage and bool(options and options.continuous_usage_stats)

    def chunk(self, tokens: list[Token], result: GenerationResult | None) -> bytes:
        ids = [t for t, _, _ in tokens]
        text = self.detok.add(ids)
        if result is not None:
            text += self.detok.flush()
        choice = CompletionStreamChoice(
            index=0,
            text=text,
            logprobs=self._logprobs(tokens, self.detok.text_len - len(text)),
            finish_reason=None if result is None else result.finish_reason,
            stop_reason=None if result is None else result.stop_reason,
            prompt_token_ids=self.prompt_ids if self.first and self.body.return_token_ids else None,
            token_ids=ids,
        )
        self.first = False
        self.n_out += len(ids)
        out = CompletionStreamResponse(
            id=self.id,
            object="text_completion",
            created=self.created,
            model=self.model,
            choices=[choice],
        )
        if result is not None:
            if result.routed_experts is not None:
                choice.routed_experts = encode_routed(result.routed_experts)
            out.policy_version = result.policy_version
            out.policy_version_final = result.policy_version_final
            out.abort_reason = result.abort_reason
            out.usage = self.usage(result)
        elif self.continuous:
            out.usage = self.usage(None)
        return b"data: " + out.model_dump_json(exclude_unset=True).encode() + b"\n\n"

    def _logprobs(self, tokens: list[Token], offset: int) -> CompletionLogProbs | None:
        """vLLM's `_create_completion_logprobs` on a delta: offsets start at the text so far."""
        if self.body.logprobs is None:
            return None
        strs = [self.token_str(t) for t, _, _ in tokens]
        offsets = []
        for s in strs:
            offsets.append(offset)
            offset += len(s)
        top: list[dict[str, float] | None] = [None] * len(tokens)
        if self.body.logprobs:
            top = [
                {self.token_str(a): lp_a for a, lp_a in [*(alts or ()), (t, lp)]}
                for t, lp, alts in tokens
            ]
        return CompletionLogProbs(
            text_offset=offsets,
            token_logprobs=[lp for _, lp, _ in tokens],
            tokens=strs,
            top_logprobs=top,
        )

    def usage(self, result: GenerationResult | None) -> Usage:
        n_prompt = len(self.prompt_ids)
        usage = Usage(
            prompt_tokens=n_prompt, completion_tokens=self.n_out, total_tokens=n_prompt + self.n_out
        )
        if result is not None:
            usage.prompt_tokens_details = PromptTokensDetails(cached_tokens=result.cached_tokens)
        return usage

    def usage_chunk(self, result: GenerationResult) -> bytes:
        out = CompletionStreamResponse(
            id=self.id,
            object="text_completion",
            created=self.created,
            model=self.model,
            choices=[],
            usage=self.usage(result),
        )
        return event(out)


def event(chunk: CompletionStreamResponse) -> bytes:
    """vLLM's final usage chunk serialisation (`exclude_none`)."""
    return b"data: " + chunk.model_dump_json(exclude_none=True).encode() + b"\n\n"


def error_event(message: str, code: int = 503) -> bytes:
    kind = "BadRequestError" if code < 500 else "ServiceUnavailableError"
    err = {"error": {"message": message, "type": kind, "code": code}}
    return b"data: " + orjson.dumps(err) + b"\n\n"


async def sse_chunks(stream: TokenStream, writer: ChunkWriter) -> AsyncIterator[bytes]:
    """The SSE body: a chunk per batch of tokens, the usage chunk if asked, `[DONE]`."""
    async for tokens, result in stream.batches():
        if isinstance(result, BaseException):
            if tokens:
                yield writer.chunk(tokens, None)
            yield error_event(f"engine failed: {result}")
            break
        yield writer.chunk(tokens, result)
        if result is not None and writer.include_usage:
            yield writer.usage_chunk(result)
    yield DONE


class EngineStreamResponse(StreamingResponse):
    """A streamed completion; calls `on_close` however the response ends (finished,
    client gone, server shutting down)."""

    def __init__(self, content: AsyncIterator[bytes], on_close: Callable[[], None]) -> None:
        super().__init__(content, media_type="text/event-stream")
        self._on_close = on_close

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._on_close()
