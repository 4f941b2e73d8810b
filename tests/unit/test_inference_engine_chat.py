"""The chat route's rendering (`inference.engine.chat.prompt_ids`) with the project's real
tokenizer loaded by transformers: the checkpoint's chat template gives the ids of
`agents.chat.ChatML`; a checkpoint without a template is refused with one clear message."""

from __future__ import annotations

import json

import pytest
from swefleet.agents.chat import ChatML
from swefleet.agents.tokenizer import Tokenizer
from swefleet.inference.engine.chat import ChatCompletionRequest, ChatRequestError, prompt_ids

from swefleet.tinymodel import train_tokenizer

pytestmark = pytest.mark.unit

MESSAGES = [
    {"role": "system", "content": "You fix bugs."},
    {"role": "user", "content": [{"type": "text", "text": "greet() "},
                                 {"type": "text", "text": "is rude"}]},
    {"role": "assistant", "content": "```bash\ncat greet.py\n```"},
    {"role": "user", "content": "<returncode>0</returncode>\n"},
]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("chat-tokenizer")
    train_tokenizer(path, vocab_size=1024)
    return path


def hf_tokenizer(path):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def test_the_chat_template_renders_chatml_token_for_token(tokenizer_dir):
    ids = prompt_ids(hf_tokenizer(tokenizer_dir), ChatCompletionRequest(messages=MESSAGES))
    chat = ChatML(Tokenizer.from_dir(tokenizer_dir))
    expected = (chat.message("system", "You fix bugs.") + chat.message("user", "greet() is rude")
                + chat.message("assistant", "```bash\ncat greet.py\n```")
                + chat.message("user", "<returncode>0</returncode>\n") + chat.generation_prompt())
    assert ids == expected


def test_a_checkpoint_without_a_chat_template_is_refused(tokenizer_dir, tmp_path):
    for name in ("tokenizer.json", "special_tokens_map.json"):
        (tmp_path / name).write_bytes((tokenizer_dir / name).read_bytes())
    config = json.loads((tokenizer_dir / "tokenizer_config.json").read_text())
    del config["chat_template"]
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ChatRequestError, match="has no chat template"):
        prompt_ids(hf_tokenizer(tmp_path), ChatCompletionRequest(messages=MESSAGES))
