"""Client side of streamed completions: SSE chunks back into one `CompletionResponse`.

The fleet client streams only to enforce `first_token_timeout_s` on unified servers
(`inference/fleet.py`). The chunks are vLLM 0.26.0 `CompletionStreamResponse`s (the embedded
engine and the scripted server send the same, `inference/wire.py`): delta `token_ids` (vLLM:
with `return_token_ids`) and delta `logprobs.token_logprobs` are concatenated; `finish_reason`,
`stop_reason`, `routed_experts`, `policy_version*`, `abort_reason`, `kv_transfer_params` and
`usage` are taken from the chunks that carry them (the last one wins). The result is what the
same request answers unstreamed, so `FleetClient._completion` reads both alike. Chunks are parsed
with orjson into dicts (no pydantic per chunk).
"""

from __future__ import annotations

from typing import Any

import orjson
from pydantic import ValidationError
from swefleet.inference.wire import CompletionChoice, CompletionLogProbs, CompletionResponse, Usage

_TOP_LEVEL = ("policy_version", "policy_version_final", "abort_reason", "kv_transfer_params")


class StreamError(RuntimeError):
    """The server reported an error inside the stream (`data: {"error": ...}`)."""


class StreamAssembler:
    """Accumulates the chunks of one streamed completion (one choice)."""

    def __init__(self) -> None:
        self.token_ids: list[int] = []
        self.logprobs: list[float | None] = []
        self.ids_missing = False
        self.logprobs_missing = False
        self.finish_reason: str | None = None
        self.stop_reason: int | str | None = None
        self.routed_experts: str | None = None
        self.model = ""
        self.top: dict[str, Any] = {}
        self.usage: dict | None = None

    @property
    def tokens(self) -> int:
        """Tokens received so far."""
        return max(len(self.token_ids), len(self.logprobs))

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    def add(self, payload: bytes) -> None:
        """One `data:` payload (without the `[DONE]` sentinel)."""
        try:
            data = orjson.loads(payload)
        except orjson.JSONDecodeError as exc:
            raise StreamError(f"malformed chunk: {payload[:200]!r}") from exc
        if not isinstance(data, dict) or not isinstance(data.get("choices") or [], list):
            raise StreamError(f"malformed chunk: {payload[:200]!r}")
        if "error" in data:
            raise StreamError(str(data["error"])[:500])
        self.model = data.get("model") or self.model
        for key in _TOP_LEVEL:
            if data.get(key) is not None:
                self.top[key] = data[key]
        if data.get("usage"):
            self.usage = data["usage"]
        for choice in data.get("choices") or ():
            self._choice(choice)

    def _choice(self, choice: dict) -> None:
        if not isinstance(choice, dict):
            raise StreamError(f"malformed choice: {str(choice)[:200]}")
        ids = choice.get("token_ids")
        logprobs = choice.get("logprobs")
        token_logprobs = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
        if not all(
            isinstance(v, t)
            for v, t in ((ids, list | None), (logprobs, dict | None), (token_logprobs, list | None))
        ):
            raise StreamError(f"malformed choice: {str(choice)[:200]}")
        if ids is None:
            self.ids_missing = True
        else:
            self.token_ids += ids
        if logprobs is None:
            self.logprobs_missing = True
        else:
            self.logprobs += token_logprobs or ()
        if choice.get("finish_reason") is not None:
            self.finish_reason = choice["finish_reason"]
            self.stop_reason = choice.get("stop_reason")
        if choice.get("routed_experts") is not None:
            self.routed_experts = choice["routed_experts"]

    def response(self) -> CompletionResponse:
        """The completion as the unstreamed answer would have been (ids/logprobs None where
        a chunk lacked them, so the caller rejects the answer as it would unstreamed);
        `StreamError` when the chunks hold values of the wrong types."""
        try:
            return self._response()
        except ValidationError as exc:
            raise StreamError(f"malformed stream: {exc}") from None

    def _response(self) -> CompletionResponse:
        choice = CompletionChoice(
            token_ids=None if self.ids_missing else self.token_ids,
            logprobs=None
            if self.logprobs_missing
            else CompletionLogProbs(token_logprobs=self.logprobs),
            finish_reason=self.finish_reason,
            stop_reason=self.stop_reason,
            routed_experts=self.routed_experts,
        )
        usage = Usage.model_validate(self.usage) if self.usage else Usage()
        return CompletionResponse(model=self.model, choices=[choice], usage=usage, **self.top)
