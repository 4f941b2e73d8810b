"""`POST /v1/chat/completions` of the embedded engine: messages -> the checkpoint's chat template
-> prompt ids -> the same generation as `/v1/completions` -> one assistant message.

The messages are rendered by the tokenizer's own `apply_chat_template` (its `chat_template`
from `tokenizer_config.json`, with the generation prompt) and the rendered text is tokenized
without added special tokens, as vLLM's chat server does. A checkpoint without a chat template,
or messages its template refuses, answer 400.

What the answer holds (vLLM's `ChatCompletionResponse`): `choices[0].message` with `role`
`assistant` and `content` (the generated ids decoded without the final stop token, special
tokens skipped unless `skip_special_tokens: false`), `finish_reason` (`stop`, `length`,
`abort`), `usage`; extensions as on `/v1/completions`: `choices[0].token_ids` (the generated
ids, stop token included), top-level `prompt_token_ids` with `return_token_ids`,
`policy_version`. Sampling fields are those of `/v1/completions` (`max_tokens`, or
`max_completion_tokens`; unset: up to the model's length); fields it refuses are refused here
too. Not supported (400): native tool calls (`tools`), `logprobs`, `stream`, `n` > 1,
`continue_final_message`.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from swefleet.inference.engine.core import GenerationResult
from swefleet.inference.wire import CompletionRequest


class ChatRequestError(ValueError):
    """A chat request the embedded engine cannot serve (answered 400 with this message)."""


class ChatCompletionRequest(BaseModel):
    """POST /v1/chat/completions body (the subset of vLLM's fields the engine implements)."""

    model_config = ConfigDict(extra="allow")  # other sampling fields go on to the completion

    model: str | None = None
    messages: list[dict[str, Any]] = Field(min_length=1)
    max_tokens: int | None = Field(None, ge=0)
    max_completion_tokens: int | None = Field(None, ge=0)
    temperature: float | None = Field(None, ge=0)
    top_p: float | None = Field(None, gt=0, le=1)
    seed: int | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    return_token_ids: bool | None = None
    add_generation_prompt: bool = True
    continue_final_message: bool = False
    stream: bool | None = False
    tools: list[dict[str, Any]] | None = None
    logprobs: bool | None = False

    def refused(self) -> list[str]:
        """Fields set to something this route does not implement."""
        bad = [name for name in ("tools", "logprobs", "stream", "continue_final_message")
               if getattr(self, name)]
        return bad


def prompt_ids(tokenizer: Any, body: ChatCompletionRequest) -> list[int]:
    """The messages rendered by the tokenizer's chat template, tokenized as vLLM does."""
    if refused := body.refused():
        raise ChatRequestError(
            f"not supported by the embedded engine's chat route: {refused} (native tool calls: "
            "use the bash scaffold, or /v1/completions with token ids)")
    if tokenizer is None:
        raise ChatRequestError("model has no tokenizer: use /v1/completions with token ids")
    if not getattr(tokenizer, "chat_template", None):
        raise ChatRequestError(
            "the checkpoint's tokenizer has no chat template (`chat_template` in "
            "tokenizer_config.json): add one, or use /v1/completions with token ids")
    messages = [_plain(m, i) for i, m in enumerate(body.messages)]
    from jinja2 import TemplateError

    try:
        text = tokenizer.apply_chat_template(
            messages, tokenize=False, add_generation_prompt=body.add_generation_prompt)
    except TemplateError as exc:
        raise ChatRequestError(f"the chat template refused the messages: {exc}") from None
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def completion_request(
    body: ChatCompletionRequest, ids: list[int], max_model_len: int
) -> CompletionRequest:
    """The `/v1/completions` request that generates the reply to `ids`."""
    limit = body.max_completion_tokens if body.max_tokens is None else body.max_tokens
    if limit is None:
        limit = max(max_model_len - len(ids), 0)
    chat_only = set(ChatCompletionRequest.model_fields) - set(CompletionRequest.model_fields)
    fields = body.model_dump(exclude={*chat_only, "logprobs", "stream"})
    return CompletionRequest(**{**fields, "prompt": ids, "max_tokens": limit})


def answer(
    body: ChatCompletionRequest, ids: list[int], result: GenerationResult, tokenizer: Any,
    name: str,
) -> dict[str, Any]:
    """The chat completion answer of `result` (vLLM's shape plus the engine's extensions)."""
    reply = list(result.token_ids)
    if reply and result.finish_reason == "stop":
        reply.pop()  # the EOS or stop token ends the turn; it is not part of the text
    content = tokenizer.decode(reply, skip_special_tokens=body.skip_special_tokens)
    n_out = len(result.token_ids)
    choice = {"index": 0, "message": {"role": "assistant", "content": content},
              "logprobs": None, "finish_reason": result.finish_reason,
              "stop_reason": result.stop_reason, "token_ids": list(result.token_ids)}
    data: dict[str, Any] = {
        "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion",
        "created": int(time.time()), "model": name, "choices": [choice],
        "usage": {"prompt_tokens": result.prompt_len, "completion_tokens": n_out,
                  "total_tokens": result.prompt_len + n_out,
                  "prompt_tokens_details": {"cached_tokens": result.cached_tokens}},
        "policy_version": result.policy_version,
        "abort_reason": result.abort_reason,
    }
    if body.return_token_ids:
        data["prompt_token_ids"] = ids
    return data


def _plain(message: dict[str, Any], index: int) -> dict[str, Any]:
    """A message with string `role` and `content` (OpenAI text parts joined; None: "")."""
    role, content = message.get("role"), message.get("content")
    if not isinstance(role, str):
        raise ChatRequestError(f"messages[{index}] has no role")
    if isinstance(content, list):
        if not all(isinstance(p, dict) and p.get("type") == "text" for p in content):
            raise ChatRequestError(f"messages[{index}]: only text content parts are supported")
        content = "".join(str(p.get("text", "")) for p in content)
    if content is not None and not isinstance(content, str):
        raise ChatRequestError(f"messages[{index}].content must be a string or text parts")
    return {**message, "role": role, "content": content or ""}
