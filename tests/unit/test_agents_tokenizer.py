"""agents.tokenizer and agents.chat: byte-exact encode/decode and ChatML token deltas."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from swefleet.agents.chat import ChatML
from swefleet.agents.tokenizer import Tokenizer

from swefleet.tinymodel import train_tokenizer

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def tok_dir(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("tokenizer")
    train_tokenizer(path, vocab_size=1024)
    return path


@pytest.fixture(scope="module")
def tok(tok_dir) -> Tokenizer:
    return Tokenizer.from_dir(tok_dir)


def test_special_ids_match_tokenizer_json(tok, tok_dir):
    added = {
        t["content"]: t["id"]
        for t in json.loads((tok_dir / "tokenizer.json").read_text())["added_tokens"]
    }
    assert tok.im_start_id == added["<|im_start|>"]
    assert tok.im_end_id == added["<|im_end|>"]
    assert tok.eos_id == added["<|im_end|>"]  # eos_token of tokenizer_config.json
    assert len({tok.im_start_id, tok.im_end_id, added["<|endoftext|>"]}) == 3


def test_eos_falls_back_to_im_end_without_config(tmp_path, tok_dir):
    (tmp_path / "tokenizer.json").write_bytes((tok_dir / "tokenizer.json").read_bytes())
    assert Tokenizer.from_dir(tmp_path).eos_id == Tokenizer.from_dir(tok_dir).im_end_id
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"eos_token": {"content": "<|endoftext|>"}})
    )
    t = Tokenizer.from_dir(tmp_path)
    assert t.eos_id == t.token_to_id("<|endoftext|>") != t.im_end_id


@pytest.mark.parametrize(
    "text", ["def f(x):\n    return x + 1\n", "héllo wörld €", "emoji 😀 tab\t", ""]
)
def test_roundtrip_is_exact(tok, text):
    assert tok.decode(tok.encode(text)) == text


def test_special_token_text_stays_text(tok):
    ids = tok.encode("x <|im_end|> <|im_start|>user")
    assert tok.im_end_id not in ids and tok.im_start_id not in ids
    assert tok.decode(ids) == "x <|im_end|> <|im_start|>user"


def test_decode_shows_invalid_utf8_as_replacement(tok):
    ids = tok.encode("😀")
    assert len(ids) > 1  # a 4-byte char is several byte-level tokens in a 1k vocab
    assert "\ufffd" in tok.decode(ids[:1])
    assert tok.decode([tok.im_end_id]) == "<|im_end|>"


def test_missing_files_and_tokens_fail_loudly(tmp_path, tok_dir):
    with pytest.raises(FileNotFoundError):
        Tokenizer.from_dir(tmp_path)
    renamed = (tok_dir / "tokenizer.json").read_text().replace("<|im_start|>", "<|start|>")
    (tmp_path / "tokenizer.json").write_text(renamed)
    with pytest.raises(ValueError, match="im_start"):
        Tokenizer.from_dir(tmp_path)


def test_chatml_initial_prompt_equals_rendered_template_tokens(tok, tok_dir):
    from tokenizers import Tokenizer as Backend

    chat = ChatML(tok)
    ids = chat.initial_prompt("You are X.", "Fix bug\nplease")
    rendered = (
        "<|im_start|>system\nYou are X.<|im_end|>\n<|im_start|>user\nFix bug\nplease<|im_end|>\n"
        "<|im_start|>assistant\n"
    )
    assert tok.decode(ids) == rendered
    # same ids as the HF-style tokenization of the rendered template (specials recognized)
    backend = Backend.from_file(str(tok_dir / "tokenizer.json"))
    assert ids == backend.encode(rendered, add_special_tokens=False).ids


def test_observation_delta_closes_turn_exactly_once(tok):
    chat = ChatML(tok)
    stopped = [*tok.encode("```bash\nls\n```"), tok.im_end_id]
    cut = tok.encode("```bash\nls")  # finish_reason length: no end token
    tail = "<|im_start|>user\nobs<|im_end|>\n<|im_start|>assistant\n"
    assert tok.decode(chat.observation_delta(stopped, "obs")) == "\n" + tail
    assert tok.decode(chat.observation_delta(cut, "obs")) == "<|im_end|>\n" + tail
    assert chat.completion_text(stopped) == "```bash\nls\n```"
    assert chat.completion_text(cut) == "```bash\nls"


def test_agents_import_no_torch_or_transformers():
    code = (
        "import sys, agents, agents.loop, agents.scripted, agents.export, agents.tokenizer;"
        "bad = [m for m in ('torch', 'transformers', 'trainer') if m in sys.modules];"
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parents[2])
