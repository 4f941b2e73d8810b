"""A client of one OpenAI-compatible chat endpoint (`POST {server}/v1/chat/completions`): the
model works on messages, the server applies its own chat template; no local tokenizer.

One `chat` call = one assistant reply (`ChatReply`), or one `RequestCancelled` with a reason,
as `FleetClient.generate` on the token path:

- `timeout`: the total deadline `request_timeout_s` (retries and their waits included) passed.
  Never retried.
- `overload`: HTTP 429 or 503 after the retry budget, or a `Retry-After` longer than the time
  left.
- `server_error`: other HTTP errors (4xx are never retried), a malformed or truncated answer,
  the retry budget spent on connection errors or 5xx.

Retries (tenacity, at most `retry_budget` per call) only after connection errors (refused,
reset, closed before the answer), HTTP 429 (waiting its `Retry-After` seconds when given) and
HTTP 5xx; else after `retry_backoff_s`, doubling, capped at 1 s. Token counts come from the
answer's `usage`. The API key (`evals.chat_endpoint.api_key_from_env`) is sent as a bearer
token and appears in no message or log.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Self

import aiohttp
import orjson
from pydantic import BaseModel, Field
from swefleet.inference.config import InferenceConfig
from swefleet.inference.protocol import CancelReason, RequestCancelled
from tenacity import AsyncRetrying, RetryCallState, retry_if_exception_type, stop_after_attempt

_MAX_BACKOFF_S = 1.0


class ChatReply(BaseModel):
    """One assistant reply of a chat endpoint."""

    content: str
    """The reply's text (empty when the server sent none)."""
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    """Native tool calls as the server sent them (`id`, `type`, `function.name`,
    `function.arguments` as a JSON string)."""
    finish_reason: str = ""
    prompt_tokens: int = 0
    """`usage.prompt_tokens` of the answer (0 when the server sent no usage)."""
    completion_tokens: int = 0
    """`usage.completion_tokens` of the answer (0 when the server sent no usage)."""
    model: str = ""
    """The model that answered, as the server names it."""
    latency_s: float = 0.0

    def message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        return message


class _Retryable(Exception):
    """An attempt another attempt may fix: connection error, HTTP 429 or 5xx."""

    def __init__(self, message: str, status: int = 0, retry_after_s: float | None = None):
        super().__init__(message)
        self.status = status
        self.retry_after_s = retry_after_s


class ChatClient:
    """Async client of one chat endpoint (`url` without `/v1/...`)."""

    def __init__(self, url: str, model: str, config: InferenceConfig, api_key: str = "") -> None:
        self.url = url.rstrip("/")
        self.model = model
        self.config = config
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._session: aiohttp.ClientSession | None = None
        self.totals: dict[str, int] = {"requests": 0, "completed": 0, "retries": 0}

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def chat(
        self, messages: list[dict[str, Any]], *, max_tokens: int, tools: list | None = None
    ) -> ChatReply:
        """One assistant reply to `messages` (with `tools` offered when given)."""
        body = self._body(messages, max_tokens, tools)
        self.totals["requests"] += 1
        t0 = time.monotonic()
        deadline = t0 + self.config.request_timeout_s
        try:
            async with asyncio.timeout(self.config.request_timeout_s):
                data = await self._retrying(deadline)(self._attempt, body)
        except TimeoutError:
            raise self._drop(
                CancelReason.timeout, f"no reply within {self.config.request_timeout_s}s"
            ) from None
        except _Retryable as exc:
            overloaded = exc.status in (429, 503)
            reason = CancelReason.overload if overloaded else CancelReason.server_error
            raise self._drop(reason, str(exc)) from None
        except RequestCancelled as exc:
            raise self._drop(exc.reason, exc.detail) from None
        reply = parse_reply(self.url, data)
        reply.latency_s = time.monotonic() - t0
        self.totals["completed"] += 1
        return reply

    def _body(self, messages: list, max_tokens: int, tools: list | None) -> dict[str, Any]:
        cfg = self.config
        body: dict[str, Any] = {
            "messages": messages,
            "max_tokens": min(max_tokens, cfg.max_tokens_per_turn),
            "temperature": cfg.temperature,
            "top_p": cfg.top_p,
        }
        if self.model:
            body["model"] = self.model
        if tools:
            body["tools"] = tools
        return body

    def _retrying(self, deadline: float) -> AsyncRetrying:
        """Up to `retry_budget` retries; before each, wait `Retry-After` or back off."""
        base = self.config.retry_backoff_s

        def wait(state: RetryCallState) -> float:
            exc = state.outcome.exception() if state.outcome else None
            if isinstance(exc, _Retryable) and exc.retry_after_s is not None:
                if time.monotonic() + exc.retry_after_s > deadline:
                    raise RequestCancelled(
                        CancelReason.overload,
                        f"{exc}; Retry-After {exc.retry_after_s:g}s exceeds the time left",
                    )
                return exc.retry_after_s
            return min(base * 2 ** (state.attempt_number - 1), _MAX_BACKOFF_S)

        def count(state: RetryCallState) -> None:
            self.totals["retries"] += 1

        return AsyncRetrying(
            retry=retry_if_exception_type(_Retryable),
            stop=stop_after_attempt(self.config.retry_budget + 1),
            wait=wait,
            before_sleep=count,
            reraise=True,
        )

    async def _attempt(self, body: dict[str, Any]) -> Any:
        """One POST; the decoded JSON of a 200 answer, else `_Retryable` / `RequestCancelled`."""
        url = f"{self.url}/v1/chat/completions"
        try:
            async with self._open().post(url, data=orjson.dumps(body), headers=self._headers) as r:
                status, content = r.status, await r.read()
                retry_after = _retry_after(r.headers.get("Retry-After"))
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
            raise _Retryable(f"{self.url}: {type(exc).__name__}: {exc}") from None
        if status == 429 or status >= 500:
            text = content[:200].decode("utf-8", "replace")
            raise _Retryable(f"{self.url}: HTTP {status} {text}", status, retry_after)
        if status != 200:
            text = content[:300].decode("utf-8", "replace")
            raise RequestCancelled(CancelReason.server_error, f"{self.url}: HTTP {status} {text}")
        try:
            return orjson.loads(content)
        except orjson.JSONDecodeError as exc:
            raise RequestCancelled(
                CancelReason.server_error, f"{self.url}: the answer is not JSON ({exc})"
            ) from None

    def _open(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=self.config.connect_timeout_s)
            self._session = aiohttp.ClientSession(timeout=timeout, trust_env=False)
        return self._session

    def _drop(self, reason: CancelReason, detail: str) -> RequestCancelled:
        key = f"drops/{reason.value}"
        self.totals[key] = self.totals.get(key, 0) + 1
        return RequestCancelled(reason, detail)


def parse_reply(url: str, data: Any) -> ChatReply:
    """The first choice of a chat completion answer; `RequestCancelled(server_error)` when the
    answer is not one."""
    try:
        choice = data["choices"][0]
        message = choice["message"]
        content = message.get("content") or ""
        tool_calls = message.get("tool_calls") or []
        usage = data.get("usage") or {}
        return ChatReply(
            content=content,
            tool_calls=tool_calls,
            finish_reason=choice.get("finish_reason") or "",
            prompt_tokens=usage.get("prompt_tokens") or 0,
            completion_tokens=usage.get("completion_tokens") or 0,
            model=data.get("model") or "",
        )
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as exc:
        raise RequestCancelled(
            CancelReason.server_error,
            f"{url}: malformed chat answer ({type(exc).__name__}: {exc})",
        ) from None


def _retry_after(value: str | None) -> float | None:
    """Seconds of a `Retry-After` header in its delay-seconds form (an HTTP date: None)."""
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
