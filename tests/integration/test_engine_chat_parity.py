"""One checkpoint evaluated both ways on one embedded engine (tiny random-init Qwen3, loopback
subprocess): the token path (`agents.loop.run_episode` through the fleet, `/v1/completions` on
token ids) and the chat path (`agents.chat_loop.run_chat_episode`, `/v1/chat/completions` with
the checkpoint's chat template), greedy, the bash scaffold, a local shell sandbox.

The chat route renders a conversation to exactly the ids `agents.chat.ChatML` builds for it,
so the first turn is the same request and gets the same reply. Later turns re-render each
earlier reply from its text where the token path keeps the generated ids: the two contexts stay
the same as long as every reply's ids are the tokenizer's own encoding of its text (valid UTF-8,
re-encoded to the same ids). So the episodes agree turn by turn up to and including the first
reply that does not re-encode to itself, and wholly when every reply does.
"""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest
from swefleet.agents.chat import ChatML
from swefleet.agents.chat_loop import run_chat_episode
from swefleet.agents.config import AgentConfig
from swefleet.agents.loop import run_episode
from swefleet.agents.tokenizer import Tokenizer
from swefleet.inference.chat_client import ChatClient
from swefleet.inference.config import InferenceConfig
from swefleet.inference.fleet import FleetClient

from swefleet.types import EpisodeStatus, Task

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ holds shared helpers
from local_sandbox import LocalShellSandbox

pytestmark = pytest.mark.integration

TASK = Task(instance_id="demo__demo-1", repo="demo/demo", problem_statement="greet() is rude.")
FILES = {"greet.py": "def greet():\n    return 'go away'\n"}
CONVERSATION = [
    {"role": "system", "content": "You fix bugs.\nOne ```bash block per reply."},
    {"role": "user", "content": "greet() is rude: 'go away'"},
    {"role": "assistant", "content": "```bash\ncat greet.py\n```"},
    {"role": "user", "content": "<returncode>0</returncode>\ndef greet(): ..."},
]


@pytest.fixture(scope="module")
def tok(model_dir) -> Tokenizer:
    return Tokenizer.from_dir(model_dir)


@pytest.fixture()
def http(server):
    with httpx.Client(base_url=server.url, trust_env=False, timeout=60) as client:
        yield client


def chatml(tok: Tokenizer, messages: list[dict]) -> list[int]:
    chat = ChatML(tok)
    ids = [i for m in messages for i in chat.message(m["role"], m["content"])]
    return ids + chat.generation_prompt()


def re_encodes(tok: Tokenizer, completion_ids: list[int]) -> bool:
    """Whether a reply's ids (stop token removed) are the tokenizer's encoding of its text."""
    ids = completion_ids[:-1] if completion_ids[-1:] == [tok.im_end_id] else completion_ids
    return tok.is_valid_utf8(ids) and tok.encode(tok.decode(ids)) == ids


def test_chat_route_renders_chatml_and_generates_as_completions(http, tok):
    body = {"messages": CONVERSATION, "max_tokens": 12, "temperature": 0,
            "return_token_ids": True}
    chat = http.post("/v1/chat/completions", json=body).json()
    prompt = chatml(tok, CONVERSATION)
    assert chat["prompt_token_ids"] == prompt  # the template, token for token
    plain = http.post("/v1/completions", json={"prompt": prompt, "max_tokens": 12,
                                               "temperature": 0}).json()
    (choice,) = chat["choices"]
    assert choice["token_ids"] == plain["choices"][0]["token_ids"]
    assert choice["finish_reason"] == plain["choices"][0]["finish_reason"]
    assert choice["message"] == {"role": "assistant", "content": plain["choices"][0]["text"]}
    assert chat["usage"]["prompt_tokens"] == len(prompt)
    assert chat["usage"]["completion_tokens"] == len(choice["token_ids"]) == 12


def test_chat_route_refuses_what_it_does_not_serve(http):
    tools = [{"type": "function", "function": {"name": "bash", "parameters": {}}}]
    cases = [({"tools": tools}, 400, "native tool calls"), ({"n": 2}, 400, "'n'"),
             ({"stream": True}, 400, "stream"), ({"model": "other"}, 404, "other"),
             ({"messages": [{"content": "x"}]}, 400, "no role")]
    for extra, status, words in cases:
        resp = http.post("/v1/chat/completions", json={"messages": CONVERSATION, **extra})
        assert resp.status_code == status and words in resp.json()["error"]["message"], resp.text


async def both_ways(server, tok, tmp_path, agent: AgentConfig):
    inference = InferenceConfig(temperature=0.0, request_timeout_s=120, retry_budget=0,
                                max_tokens_per_turn=agent.max_tokens_per_turn)
    async with FleetClient([server.url], inference) as fleet:
        sandbox = LocalShellSandbox.create(tmp_path / "tokens", FILES)
        tokens = await run_episode(TASK, sandbox, fleet, tok, agent, "tokens")
    async with ChatClient(server.url, "", inference) as client:
        sandbox = LocalShellSandbox.create(tmp_path / "chat", FILES)
        chat = await run_chat_episode(TASK, sandbox, client, None, agent, "chat")
    return tokens, chat


@pytest.mark.timeout(180)
@pytest.mark.parametrize("reply_tokens,all_re_encode", [(4, True), (24, False)])
async def test_token_and_chat_paths_give_the_same_episode(server, tok, tmp_path, reply_tokens,
                                                           all_re_encode):
    agent = AgentConfig(scaffold="bash", max_tokens_per_turn=reply_tokens, max_steps=6,
                        max_format_errors=6)
    tokens, chat = await both_ways(server, tok, tmp_path, agent)
    text = ChatML(tok).completion_text
    flags = [re_encodes(tok, t.completion_ids) for t in tokens.turns]
    assert all(flags) == all_re_encode, flags  # the case this parameter is meant to cover
    agree = flags.index(False) + 1 if False in flags else len(tokens.turns)
    context = 0
    for t, c, same in zip(tokens.turns[:agree], chat.turns[:agree], flags[:agree], strict=True):
        context += len(t.prompt_ids)
        assert c.reply["content"] == text(t.completion_ids)
        assert (c.finish_reason, c.prompt_tokens) == (t.finish_reason, context)
        assert c.completion_tokens == len(t.completion_ids)
        if same:  # else its text may not be UTF-8: the token path says so, the chat path can't
            assert (c.observation, c.action) == (t.observation, t.action)
        context += len(t.completion_ids)
    if all_re_encode:
        assert len(chat.turns) == len(tokens.turns) == 6
        assert (chat.status, chat.reason) == (tokens.status, tokens.reason)
    assert chat.status == tokens.status == EpisodeStatus.format_errors
