"""A deterministic scripted model (implements `inference.protocol.ModelClient`).

It replies with scripted texts tokenized by the real tokenizer (plus the `<|im_end|>` stop
token), with a fixed logprob per token, and records every request it receives. Script entries
can also be raw token ids (e.g. invalid UTF-8), delays, or exceptions to raise (e.g.
`RequestCancelled(CancelReason.timeout)`). Used by tests and as a learning-sanity policy.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict
from swefleet.agents.protocol import ChatTokenizer
from swefleet.inference.protocol import Completion


class ScriptedReply(BaseModel):
    """One scripted answer; `text` is tokenized, `ids` are used as given."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    text: str | None = None
    """Reply text; tokenized and followed by `<|im_end|>` (finish_reason `stop`)."""
    ids: list[int] | None = None
    """Raw completion ids (finish_reason `stop` unless `finish_reason` is set)."""
    finish_reason: str | None = None
    """Override of the finish reason."""
    delay_s: float = 0.0
    """Seconds to wait before answering (or raising)."""
    raises: BaseException | None = None
    """Exception to raise instead of answering (after `delay_s`)."""
    policy_version: int | None = None
    """Policy version to report (default: the model's `version`)."""


class ScriptedRequest(BaseModel):
    """One request the model received."""

    episode_id: str
    prompt_ids: list[int]
    max_tokens: int
    min_policy_version: int


ScriptEntry = str | ScriptedReply | BaseException


class ScriptExhausted(Exception):
    """The script has no reply left for this episode."""


class ScriptedModel:
    """Replays `script` for every episode id (each episode has its own cursor)."""

    def __init__(
        self,
        tokenizer: ChatTokenizer,
        script: Sequence[ScriptEntry],
        *,
        version: int = 0,
        logprob: float = -0.5,
    ) -> None:
        self.tokenizer = tokenizer
        self.script = [_as_reply(entry) for entry in script]
        self.version = version
        self.logprob = logprob
        self.requests: list[ScriptedRequest] = []
        self._cursor: dict[str, int] = {}

    @property
    def prompts(self) -> list[list[int]]:
        """Prompt ids of every request, in arrival order."""
        return [r.prompt_ids for r in self.requests]

    async def policy_version(self) -> int:
        return self.version

    async def generate(
        self,
        prompt_ids: list[int],
        *,
        max_tokens: int,
        episode_id: str = "",
        min_policy_version: int = 0,
    ) -> Completion:
        self.requests.append(
            ScriptedRequest(
                episode_id=episode_id,
                prompt_ids=list(prompt_ids),
                max_tokens=max_tokens,
                min_policy_version=min_policy_version,
            )
        )
        reply = self._next(episode_id)
        if reply.delay_s:
            await asyncio.sleep(reply.delay_s)
        if reply.raises is not None:
            raise reply.raises
        return self._complete(reply, max_tokens)

    def _next(self, episode_id: str) -> ScriptedReply:
        index = self._cursor.get(episode_id, 0)
        if index >= len(self.script):
            raise ScriptExhausted(f"no scripted reply #{index} for episode {episode_id!r}")
        self._cursor[episode_id] = index + 1
        return self.script[index]

    def _complete(self, reply: ScriptedReply, max_tokens: int) -> Completion:
        if reply.ids is not None:
            ids = list(reply.ids)
        else:
            ids = [*self.tokenizer.encode(reply.text or ""), self.tokenizer.im_end_id]
        finish = reply.finish_reason or "stop"
        if len(ids) > max_tokens:  # like a server: cut at max_tokens, no stop token
            ids, finish = ids[:max_tokens], "length"
        version = self.version if reply.policy_version is None else reply.policy_version
        return Completion(
            completion_ids=ids,
            logprobs=[self.logprob] * len(ids),
            finish_reason=finish,
            policy_version=version,
            server="scripted",
        )


def _as_reply(entry: ScriptEntry) -> ScriptedReply:
    if isinstance(entry, ScriptedReply):
        return entry
    if isinstance(entry, BaseException):
        return ScriptedReply(raises=entry)
    return ScriptedReply(text=entry)
