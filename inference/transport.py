"""HTTP transport of the fleet client: one aiohttp session, orjson bodies, typed failures.

Why aiohttp and not httpx (benchmarks/fleet_client.py, docs/benchmarks.md): at 256 requests in
flight httpx spent ~3 ms of client CPU per request, most of it in httpcore's connection pool
(every request scans every connection: `_assign_requests_to_connections`, `is_idle`,
`has_expired` -> anyio `extra_attributes` -> `getpeername`), plus h11's pure-Python parser.
aiohttp keeps idle connections in a per-host deque and parses HTTP in C (llhttp); orjson
encodes/decodes the JSON. Same loopback server: ~0.6 ms per request for a bare aiohttp loop.

Failures are mapped to two exception types so the caller decides about retries:

- `ConnectFailed`: the request never reached a server (refused, connect timeout, DNS);
- `ConnectionLost`: the connection broke before the whole answer arrived (reset, closed,
  truncated body) or what arrived is not HTTP (bad status line, malformed or oversized
  headers). Both mean "the server did not answer this request".

aiohttp's own timers are used only for the TCP connect (`connect_timeout_s`) and for admin
calls given `timeout_s`; completions run under the caller's `asyncio.timeout` deadline (a
timeout there is `asyncio.TimeoutError` raised by the caller's context, never mapped here).
The session is created lazily inside the running loop (aiohttp binds it to that loop).

`stream` opens a POST whose answer is read as Server-Sent Events (`data:` payloads, split here
on newlines without aiohttp's 128 KiB line limit: a last chunk with routed experts is large);
leaving it before the end closes the connection, which the server sees as a disconnect.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import orjson

_JSON = {"Content-Type": "application/json"}


class ConnectFailed(ConnectionError):
    """No connection to the server (refused, connect timeout): it never saw the request."""


class ConnectionLost(ConnectionError):
    """The connection broke before the answer was complete, or carried no valid HTTP."""


#: aiohttp's errors of a connection that broke or of an answer that is not HTTP
_LOST = (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, aiohttp.ClientResponseError)


class RequestTimedOut(TimeoutError):
    """An admin call with `timeout_s` got no complete answer in time."""


class Response:
    """Status and body of one answer (the body is read completely)."""

    __slots__ = ("content", "status_code")

    def __init__(self, status_code: int, content: bytes) -> None:
        self.status_code = status_code
        self.content = content

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def json(self) -> Any:
        return orjson.loads(self.content)


class EventStream:
    """An answer being received: status now, then the body or its SSE `data:` payloads."""

    __slots__ = ("_resp", "status_code")

    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self.status_code = resp.status

    async def read(self) -> Response:
        return Response(self.status_code, await self._resp.read())

    async def events(self) -> AsyncIterator[bytes]:
        """Each `data:` payload until `data: [DONE]` or the end of the body."""
        parts: list[bytes] = []  # of the line being received (joined once it is complete)
        async for piece in self._resp.content.iter_any():
            parts.append(piece)
            if b"\n" not in piece:
                continue
            lines = b"".join(parts).split(b"\n")
            parts = [lines.pop()]
            for line in lines:
                if line.startswith(b"data:"):
                    payload = line[5:].strip()
                    if payload == b"[DONE]":
                        return
                    yield payload


class Transport:
    """Connection pool over every server of a fleet (`max_connections` in all)."""

    def __init__(self, max_connections: int, connect_timeout_s: float) -> None:
        self.max_connections = max_connections
        self.connect_timeout_s = connect_timeout_s
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=self.max_connections, limit_per_host=0, ttl_dns_cache=None
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=self.connect_timeout_s),
                trust_env=False,
                auto_decompress=False,
            )
        return self._session

    async def post(
        self,
        url: str,
        *,
        json: Any = None,
        params: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        timeout_s: float | None = None,
    ) -> Response:
        data = orjson.dumps(json) if json is not None else None
        hdrs = {**_JSON, **headers} if headers else _JSON
        return await self._request("POST", url, data, params, hdrs, timeout_s)

    @asynccontextmanager
    async def stream(
        self, url: str, *, json: Any, headers: dict[str, str] | None = None
    ) -> AsyncIterator[EventStream]:
        """POST `json` and hand over the answer as it arrives (no timeout of its own: run it
        under the caller's deadlines); transport failures map as in `post`."""
        hdrs = {**_JSON, **headers} if headers else _JSON
        try:
            async with self._open().post(url, data=orjson.dumps(json), headers=hdrs) as resp:
                yield EventStream(resp)
        except (aiohttp.ConnectionTimeoutError, aiohttp.ClientConnectorError) as exc:
            raise ConnectFailed(f"{type(exc).__name__}: {exc}") from exc
        except _LOST as exc:
            raise ConnectionLost(f"{type(exc).__name__}: {exc}") from exc

    async def get(self, url: str, *, timeout_s: float | None = None) -> Response:
        return await self._request("GET", url, None, None, None, timeout_s)

    async def _request(
        self,
        method: str,
        url: str,
        data: bytes | None,
        params: dict[str, str] | None,
        headers: dict[str, str] | None,
        timeout_s: float | None,
    ) -> Response:
        kwargs: dict[str, Any] = {}
        if timeout_s is not None:
            kwargs["timeout"] = aiohttp.ClientTimeout(
                total=timeout_s, sock_connect=min(timeout_s, self.connect_timeout_s)
            )
        try:
            async with self._open().request(
                method, url, data=data, params=params, headers=headers, **kwargs
            ) as resp:
                return Response(resp.status, await resp.read())
        except (aiohttp.ConnectionTimeoutError, aiohttp.ClientConnectorError) as exc:
            raise ConnectFailed(f"{type(exc).__name__}: {exc}") from exc
        except aiohttp.ServerTimeoutError as exc:
            raise RequestTimedOut(f"{type(exc).__name__}: {exc}") from exc
        except _LOST as exc:
            raise ConnectionLost(f"{type(exc).__name__}: {exc}") from exc
        except TimeoutError as exc:
            if timeout_s is None:  # not ours: an enclosing deadline
                raise
            raise RequestTimedOut(f"no answer within {timeout_s}s") from exc

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
