"""One `FleetClient.generate` call before it meets a server: its /v1/completions body, its state
across attempts, and the failure of one attempt that another attempt may fix."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from swefleet.inference.config import InferenceConfig
from swefleet.inference.routing import ServerState


def request_body(cfg: InferenceConfig, prompt_ids: list[int], max_tokens: int) -> dict:
    """The /v1/completions body for exact prompt ids (valid for vLLM and the embedded engine)."""
    body = {
        "prompt": prompt_ids,
        "max_tokens": min(max_tokens, cfg.max_tokens_per_turn),
        "temperature": cfg.temperature,
        "top_p": cfg.top_p,
        "logprobs": 0,
        "return_token_ids": True,
        "skip_special_tokens": False,
    }
    if cfg.stop_token_ids:
        body["stop_token_ids"] = cfg.stop_token_ids
    if cfg.model_name:
        body["model"] = cfg.model_name
    return body


class Retryable(Exception):
    """An attempt failed before the server answered it (connection error, HTTP 502/503)."""

    def __init__(self, message: str, status: int = 0) -> None:
        super().__init__(message)
        self.status = status


@dataclass
class Call:
    """State of one `generate` call across its attempts."""

    body: dict
    episode_id: str
    min_version: int
    t0: float
    tried: set[str] = field(default_factory=set)
    server: ServerState | None = None
    retries: int = 0
    waited: bool = False
    first_token_by: float | None = None
    """Loop time by which the first token (disaggregated serving: the prefill answer) must
    arrive."""
    stream: bool = False
    """Attempts are streamed (first-token deadline on unified servers)."""
    prefill: tuple[ServerState, int | None] | None = None
    """Prefill server and its version of the current attempt (disaggregated serving)."""
    first_token_s: float = 0.0
    """Seconds from the call's start to the prefill answer or first streamed token of the
    current attempt."""


def new_call(
    cfg: InferenceConfig,
    prompt_ids: list[int],
    max_tokens: int,
    episode_id: str,
    min_version: int,
    *,
    disaggregated: bool,
) -> Call:
    """A call starting now; streamed when a first-token deadline (or `stream`) applies to
    unified servers (disaggregated serving bounds the first token by the prefill answer)."""
    call = Call(
        request_body(cfg, prompt_ids, max_tokens), episode_id, min_version, time.monotonic()
    )
    if cfg.first_token_timeout_s is not None:
        call.first_token_by = asyncio.get_running_loop().time() + cfg.first_token_timeout_s
    if (cfg.first_token_timeout_s is not None or cfg.stream) and not disaggregated:
        call.stream = True
        call.body.update(stream=True, stream_options={"include_usage": True})
    return call
