"""Streamed completions, piece by piece: SSE splitting, chunk assembly, incremental text."""

from __future__ import annotations

import orjson
import pytest
from swefleet.inference.engine.stream import Detokenizer
from swefleet.inference.streaming import StreamAssembler, StreamError
from swefleet.inference.transport import EventStream

pytestmark = pytest.mark.unit


class _Content:
    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    async def iter_any(self):
        for piece in self.pieces:
            yield piece


class _Resp:
    status = 200

    def __init__(self, pieces: list[bytes]) -> None:
        self.content = _Content(pieces)


def vllm_chunk(ids: list[int], lps: list[float], finish: str | None = None) -> bytes:
    """A chunk as vLLM 0.26.0 serialises it (`exclude_unset`; no swefleet extras)."""
    choice = {
        "index": 0,
        "text": "",
        "logprobs": {"text_offset": [], "token_logprobs": lps, "tokens": [], "top_logprobs": []},
        "finish_reason": finish,
        "stop_reason": None,
        "prompt_token_ids": None,
        "token_ids": ids,
    }
    return orjson.dumps(
        {
            "id": "cmpl-1",
            "object": "text_completion",
            "created": 1,
            "model": "m",
            "choices": [choice],
        }
    )


async def test_events_split_on_any_boundary():
    big = b"x" * 140_000  # longer than aiohttp's readline limit
    body = b"".join(
        [
            b"data: " + vllm_chunk([1], [-0.1]) + b"\n\n",
            b": comment\r\n\r\n",
            b'data: {"big": "' + big + b'"}\r\n\r\n',
            b"data: [DONE]\n\n",
            b"data: after\n\n",
        ]
    )
    for size in (1, 7, 4096, len(body)):
        pieces = [body[i : i + size] for i in range(0, len(body), size)]
        got = [p async for p in EventStream(_Resp(pieces)).events()]  # type: ignore[arg-type]
        assert len(got) == 2 and orjson.loads(got[1])["big"] == big.decode()
        assert orjson.loads(got[0])["choices"][0]["token_ids"] == [1]


def test_assembler_concatenates_vllm_chunks():
    chunks = StreamAssembler()
    chunks.add(vllm_chunk([5, 6], [-0.5, -0.25]))
    assert chunks.tokens == 2 and not chunks.finished
    chunks.add(vllm_chunk([7], [-1.0], finish="length"))
    usage = {
        "prompt_tokens": 3,
        "completion_tokens": 3,
        "total_tokens": 6,
        "prompt_tokens_details": {"cached_tokens": 2},
    }
    chunks.add(orjson.dumps({"id": "cmpl-1", "choices": [], "usage": usage, "model": "m"}))
    data = chunks.response()
    choice = data.choices[0]
    assert choice.token_ids == [5, 6, 7] and choice.logprobs.token_logprobs == [-0.5, -0.25, -1.0]
    assert (choice.finish_reason, data.policy_version, data.model) == ("length", None, "m")
    assert data.usage.prompt_tokens_details.cached_tokens == 2


def test_assembler_extras_missing_ids_and_errors():
    chunks = StreamAssembler()
    last = orjson.loads(vllm_chunk([9], [-2.0], finish="stop"))
    last.update(policy_version=3, policy_version_final=4, abort_reason=None)
    last["choices"][0].update(stop_reason=9, routed_experts="abc")
    chunks.add(orjson.dumps(last))
    data = chunks.response()
    assert (data.policy_version, data.policy_version_final) == (3, 4)
    assert (data.choices[0].stop_reason, data.choices[0].routed_experts) == (9, "abc")

    no_ids = StreamAssembler()
    chunk = orjson.loads(vllm_chunk([1], [-1.0]))
    chunk["choices"][0]["token_ids"] = None  # vLLM without return_token_ids
    no_ids.add(orjson.dumps(chunk))
    assert no_ids.response().choices[0].token_ids is None
    with pytest.raises(StreamError, match="boom"):
        StreamAssembler().add(b'{"error": {"message": "boom", "code": 500}}')


def test_detokenizer_streams_whole_characters(tmp_path):
    from transformers import PreTrainedTokenizerFast

    from swefleet.tinymodel import train_tokenizer

    train_tokenizer(tmp_path, vocab_size=400)
    tok = PreTrainedTokenizerFast(tokenizer_file=str(tmp_path / "tokenizer.json"))
    text = "def f(x):\n    return 'héllo wörld 你好 🎉'  # ok"
    ids = tok(text)["input_ids"]
    detok = Detokenizer(tok, skip_special_tokens=True)
    deltas = [detok.add([i]) for i in ids]
    assert all("\ufffd" not in d for d in deltas)
    assert "".join(deltas) + detok.flush() == tok.decode(ids, skip_special_tokens=True) == text
    assert sum(1 for d in deltas if d) > 10  # released incrementally, not all at the end
