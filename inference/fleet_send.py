"""Sending one attempt's POST /v1/completions to one server, plain or streamed, and sorting
what goes wrong into retryable (`Retryable`) and final (`RequestCancelled`) failures.

Retryable are only connection errors (refused, reset, closed before the answer) and HTTP
502/503: the server never worked on the request; a refused server is skipped for
`server_cooldown_s`."""

from __future__ import annotations

import asyncio
import time

from swefleet.inference.config import InferenceConfig
from swefleet.inference.fleet_pool import ServerPool
from swefleet.inference.fleet_request import Call, Retryable
from swefleet.inference.protocol import CancelReason, RequestCancelled
from swefleet.inference.routing import ServerState
from swefleet.inference.streaming import StreamAssembler, StreamError
from swefleet.inference.transport import ConnectFailed, ConnectionLost, Response, Transport
from swefleet.inference.wire import CompletionResponse

#: transport failures after which the request is retried (the server never answered it)
CONNECTION_ERRORS = (ConnectFailed, ConnectionLost)
RETRYABLE_STATUS = frozenset({502, 503})


class Sender:
    """POSTs of attempts over the fleet's one `Transport`, counted on the pool's servers."""

    def __init__(self, cfg: InferenceConfig, pool: ServerPool, transport: Transport) -> None:
        self.cfg = cfg
        self.pool = pool
        self.transport = transport

    async def post(
        self, call: Call, server: ServerState, body: dict, headers: dict[str, str] | None
    ) -> Response:
        """One POST /v1/completions to `server`; a 200 answer or an exception for `generate`."""
        body = self._begin(call, server, body)
        try:
            if headers is None:
                resp = await self.transport.post(f"{server.url}/v1/completions", json=body)
            else:
                resp = await self.transport.post(
                    f"{server.url}/v1/completions", json=body, headers=headers
                )
        except CONNECTION_ERRORS as exc:
            raise self._lost(server, exc) from exc
        finally:
            self.pool.end(server)
        if resp.status_code != 200:
            self._check_status(server, resp)
        return resp

    async def post_stream(
        self, call: Call, server: ServerState, first_token: asyncio.Timeout
    ) -> CompletionResponse:
        """POST with `stream: true`; lifts `first_token` once a token arrived."""
        body = self._begin(call, server, call.body)
        chunks = StreamAssembler()
        try:
            async with self.transport.stream(f"{server.url}/v1/completions", json=body) as stream:
                if stream.status_code != 200:
                    self._check_status(server, await stream.read())
                async for payload in stream.events():
                    chunks.add(payload)
                    if not call.first_token_s and (chunks.tokens or chunks.finished):
                        first_token.reschedule(None)
                        call.first_token_s = time.monotonic() - call.t0
        except CONNECTION_ERRORS as exc:
            raise self._lost(server, exc) from exc
        except StreamError as exc:
            raise RequestCancelled(CancelReason.server_error, f"{server.url}: {exc}") from None
        finally:
            self.pool.end(server)
        if not chunks.finished:
            server.failures += 1
            raise Retryable(f"{server.url}: stream ended before the completion finished")
        try:
            return chunks.response()
        except StreamError as exc:
            raise RequestCancelled(CancelReason.server_error, f"{server.url}: {exc}") from None

    def _begin(self, call: Call, server: ServerState, body: dict) -> dict:
        """Count an attempt on `server`; the body with this server's `cache_salt` (vLLM keeps
        prefix-cache hits within one weights version)."""
        self.pool.begin(call, server)
        if self.cfg.cache_salt:
            body = {**body, "cache_salt": f"{self.cfg.cache_salt_prefix}{server.version or 0}"}
        return body

    def _lost(self, server: ServerState, exc: Exception) -> Retryable:
        server.failures += 1
        server.down_until = time.monotonic() + self.cfg.server_cooldown_s
        self.pool.unreachable(server)
        return Retryable(f"{server.url}: {type(exc).__name__}: {exc}")

    def _check_status(self, server: ServerState, resp: Response) -> None:
        """Raise the retryable or final error of a non-200 answer."""
        status = resp.status_code
        if status in RETRYABLE_STATUS:
            server.failures += 1
            if status == 503:
                self.pool.overloaded(server)
            raise Retryable(f"{server.url}: HTTP {status} {resp.text[:200]}", status)
        if status == 429:
            raise RequestCancelled(CancelReason.overload, f"{server.url}: HTTP 429")
        raise RequestCancelled(
            CancelReason.server_error, f"{server.url}: HTTP {status} {resp.text[:300]}"
        )
