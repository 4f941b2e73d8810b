"""The inference room's seams: token-in/token-out generation with policy versions and reasons."""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol

from pydantic import BaseModel, Field


class CancelReason(StrEnum):
    """Why a request ended without a completion."""

    timeout = "timeout"
    stale = "stale"
    overload = "overload"
    server_error = "server_error"
    shutdown = "shutdown"


class RequestCancelled(Exception):
    """A generation request ended without a completion; carries a typed reason."""

    def __init__(self, reason: CancelReason, detail: str = "") -> None:
        super().__init__(f"{reason.value}: {detail}" if detail else reason.value)
        self.reason = reason
        self.detail = detail


class Completion(BaseModel):
    """What the server generated for one request, token-exact."""

    completion_ids: list[int]
    logprobs: list[float]
    finish_reason: str
    """`stop` (EOS / stop token) or `length` (max_tokens hit)."""
    policy_version: int
    latency_s: float = 0.0
    server: str = ""
    routed_experts: str | None = None
    """base64 .npy (prompt + completion tokens - 1, num_hidden_layers, top_k), uint8 (<= 256
    experts) or uint16: the experts each layer chose for every forwarded token of the request,
    prompt included (vLLM 0.26.0 `--enable-return-routed-experts`; `swefleet/routed_experts.py`).
    None when the server does not return them."""
    extra: dict = Field(default_factory=dict)


class ModelClient(Protocol):
    """Generates a continuation of exact prompt token ids."""

    async def generate(
        self,
        prompt_ids: list[int],
        *,
        max_tokens: int,
        episode_id: str = "",
        min_policy_version: int = 0,
    ) -> Completion:
        """Raise `RequestCancelled` on timeout, staleness, overload or server failure."""
        ...

    async def policy_version(self) -> int: ...
