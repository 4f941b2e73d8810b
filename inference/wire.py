"""Wire schemas of the OpenAI-compatible API, shared by the embedded server and the fleet client.

`/v1/completions` follows vLLM's `CompletionRequest` / `CompletionResponse`
(`vllm/entrypoints/openai/completion/protocol.py`). What we match exactly:

- request `prompt` is one string or one list of token ids (vLLM also takes batches of prompts;
  we answer those with 400), `max_tokens` (default 16), `temperature` (None -> 1.0), `top_p`
  (None -> 1.0), `seed`, `logprobs` (int >= 0: the sampled token's logprob plus the top
  `logprobs` alternatives), `stop_token_ids`, `ignore_eos`, `return_token_ids`,
  `skip_special_tokens`, `cache_salt` (accepted, no prefix cache here), `stream` +
  `stream_options` (see below); fields we do not implement (`n` > 1, `stop` strings, `echo`,
  `top_k`, `min_p`, `min_tokens`, penalties, `logit_bias`, `prompt_logprobs`) are answered
  with 400 unless neutral; other unknown fields are ignored, as vLLM does;
- response `choices[0]` has `text`, `token_ids` (generated ids, EOS/stop id included, as vLLM),
  `prompt_token_ids` (when `return_token_ids`), `logprobs.{tokens, token_logprobs,
  top_logprobs, text_offset}`, `finish_reason` (`stop`, `length`, `abort`), `stop_reason`
  (the stop token id, None for EOS), `routed_experts` (MoE
  models: base64 `.npy` (prompt + completion - 1, layers, top_k) uint8/uint16 expert ids, as vLLM
  0.26.0 with `--enable-return-routed-experts`; see `swefleet/routed_experts.py`); `usage`.
- logprobs are vLLM's default `logprobs_mode="raw_logprobs"`: log-softmax of the raw logits,
  i.e. the model's distribution at temperature 1 before top-p, whatever `temperature` and
  `top_p` the token was sampled with.

Streaming (`stream: true`) follows vLLM's `completion_stream_generator`: Server-Sent Events
`data: <CompletionStreamResponse JSON>` per engine step that produced tokens (several tokens per
chunk when the reader lags), `choices[0]` with the delta `text`, delta `token_ids`,
`prompt_token_ids` (first chunk only, with `return_token_ids`), delta `logprobs` (text_offset
continuing from the text streamed so far), `finish_reason`/`stop_reason` on the last token's
chunk; with `stream_options.include_usage` one more chunk with `choices: []` and `usage`
(`continuous_usage_stats`: usage on every chunk too); then `data: [DONE]`. An error after the
stream started is a `data: {"error": {...}}` event, as vLLM sends.

Differences (extensions) of the embedded engine: `token_ids` is returned even without
`return_token_ids`; top-level `policy_version` (weights version when the request's first token
was generated), `policy_version_final` (version at its last token; differs when weights changed
mid-request) and `abort_reason` (`weight_update`, `cancelled`, `shutdown` when
`finish_reason == "abort"`). vLLM servers return none of them; the client then uses the version
it last set with `update_weights`. Streamed: delta `token_ids` even without `return_token_ids`;
the chunk with `finish_reason` also carries `policy_version`, `policy_version_final`,
`abort_reason`, `routed_experts` (in the choice) and the full `usage` (with
`prompt_tokens_details.cached_tokens`), whether or not `include_usage` was asked for.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field


class StreamOptions(BaseModel):
    """vLLM 0.26.0 `StreamOptions` (`entrypoints/openai/engine/protocol.py`)."""

    model_config = ConfigDict(extra="ignore")

    include_usage: bool | None = False
    """Send a last chunk with `choices: []` and the request's `usage`."""
    continuous_usage_stats: bool | None = False
    """With `include_usage`: `usage` so far on every chunk too."""


class CompletionRequest(BaseModel):
    """POST /v1/completions body (the subset of vLLM's fields the engine implements)."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    prompt: str | list[Annotated[int, Field(ge=0)]] | list[list[int]] | list[str]
    max_tokens: int = Field(16, ge=0)
    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    seed: int | None = None
    logprobs: int | None = Field(None, ge=0, le=20)
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    return_token_ids: bool | None = None
    n: int = 1
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    skip_special_tokens: bool = True
    cache_salt: str | None = None
    """vLLM: prefix-cache salt (the fleet sends one per policy version); the embedded engine has
    no prefix cache and ignores it."""
    kv_transfer_params: dict[str, Any] | None = None
    """vLLM: KV connector handle of disaggregated prefill/decode (`inference/disagg.py`)."""
    # vLLM sampling fields the engine does not implement: refused (400) unless left neutral,
    # so a caller never silently gets a different distribution than it asked for.
    stop: str | list[str] | None = None
    echo: bool = False
    top_k: int | None = None
    min_p: float | None = None
    min_tokens: int = 0
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    repetition_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    prompt_logprobs: int | None = None

    def unsupported(self) -> list[str]:
        """Fields set to something the embedded engine does not implement."""
        neutral = {
            "n": 1,
            "stop": None,
            "echo": False,
            "top_k": (None, 0, -1),
            "min_p": (None, 0.0),
            "min_tokens": 0,
            "presence_penalty": (None, 0.0),
            "frequency_penalty": (None, 0.0),
            "repetition_penalty": (None, 1.0),
            "logit_bias": None,
            "prompt_logprobs": None,
        }
        bad = []
        for name, ok in neutral.items():
            value = getattr(self, name)
            allowed = ok if isinstance(ok, tuple) else (ok,)
            if value not in allowed and value not in ([], {}, ""):
                bad.append(name)
        return bad


class CompletionLogProbs(BaseModel):
    """OpenAI legacy completion logprobs, as vLLM fills them."""

    model_config = ConfigDict(extra="ignore")

    text_offset: list[int] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    tokens: list[str] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)


class CompletionChoice(BaseModel):
    model_config = ConfigDict(extra="ignore")

    index: int = 0
    text: str = ""
    logprobs: CompletionLogProbs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None
    token_ids: list[int] | None = None
    prompt_token_ids: list[int] | None = None
    routed_experts: str | None = None


class PromptTokensDetails(BaseModel):
    """vLLM 0.26.0 `PromptTokenUsageInfo` (OpenAI `usage.prompt_tokens_details`)."""

    model_config = ConfigDict(extra="ignore")

    cached_tokens: int | None = None
    """Prompt tokens served from the prefix cache."""


class Usage(BaseModel):
    model_config = ConfigDict(extra="ignore")

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    prompt_tokens_details: PromptTokensDetails | None = None


class CompletionResponse(BaseModel):
    """POST /v1/completions answer; `policy_version*` and `abort_reason` are swefleet extensions."""

    model_config = ConfigDict(extra="ignore")

    id: str = Field(default_factory=lambda: f"cmpl-{uuid.uuid4().hex}")
    object: str = "text_completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str = ""
    choices: list[CompletionChoice]
    usage: Usage = Field(default_factory=Usage)
    policy_version: int | None = None
    policy_version_final: int | None = None
    abort_reason: str | None = None
    kv_transfer_params: dict[str, Any] | None = None
    """vLLM: the prefill server's handle for the decode server (disaggregated serving)."""


class CompletionStreamChoice(CompletionChoice):
    """vLLM 0.26.0 `CompletionResponseStreamChoice`: the same fields as a whole choice, holding
    the chunk's delta (`text`, `token_ids`, `logprobs`); `prompt_token_ids` on the first chunk,
    `finish_reason` / `stop_reason` / `routed_experts` on the last token's chunk."""


class CompletionStreamResponse(BaseModel):
    """One `data:` event of a streamed completion (vLLM 0.26.0 `CompletionStreamResponse`);
    `policy_version*` and `abort_reason` are swefleet extensions on the last chunk."""

    model_config = ConfigDict(extra="ignore")

    id: str
    object: str = "text_completion"
    created: int
    model: str = ""
    choices: list[CompletionStreamChoice]
    usage: Usage | None = None
    policy_version: int | None = None
    policy_version_final: int | None = None
    abort_reason: str | None = None


class UpdateWeightsRequest(BaseModel):
    """POST /update_weights: load HF safetensors from `path` in place and serve `version`."""

    model_config = ConfigDict(extra="forbid")

    path: str
    version: int = Field(ge=0)
    abort_in_flight: bool = False
    """End running requests with finish_reason `abort` (abort_reason `weight_update`) instead
    of letting them continue on the new weights."""


class UpdateWeightsResponse(BaseModel):
    model_config = ConfigDict(extra="ignore")

    policy_version: int
    aborted: int = 0
    load_s: float = 0.0
    apply_s: float = 0.0


class HealthResponse(BaseModel):
    model_config = ConfigDict(extra="ignore")

    status: str = "ok"
    policy_version: int = 0
    model: str = ""


class TokenizeRequest(BaseModel):
    """POST /tokenize (vLLM's completion-style form)."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    prompt: str
    add_special_tokens: bool = True


class TokenizeResponse(BaseModel):
    count: int
    max_model_len: int
    tokens: list[int]
