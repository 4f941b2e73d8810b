"""U+FFFD in a reply: a format error only when the reply's token ids are not valid UTF-8. A
U+FFFD the model copies from an observation (ids that encode its bytes EF BF BD) is an ordinary
character and reaches the sandbox intact, with both scaffolds."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
from swefleet.agents.config import AgentConfig
from swefleet.agents.loop import run_episode
from swefleet.agents.scaffolds import SUBMIT_SENTINEL
from swefleet.agents.scripted import ScriptedModel, ScriptedReply

from swefleet.types import EpisodeStatus, Task

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ holds shared helpers
from local_sandbox import LocalShellSandbox

pytestmark = pytest.mark.unit

TASK = Task(instance_id="demo__demo-1", repo="demo/demo", problem_statement="Fix the name.")
MANGLED = "name = 'caf\ufffd'\n"  # a file that an earlier lossy conversion left with U+FFFD
FILES = {"menu.py": MANGLED}
SUBMIT = f"```bash\necho {SUBMIT_SENTINEL}\n```"


def call(name: str, **arguments) -> str:
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"


@pytest.fixture
def sandbox(tmp_path) -> LocalShellSandbox:
    return LocalShellSandbox.create(tmp_path / "repo", FILES)


async def play(tok, sandbox, script, **config):
    model = ScriptedModel(tok, script)
    cfg = AgentConfig(**{"command_timeout_s": 10.0, "max_format_errors": 2, **config})
    return await run_episode(TASK, sandbox, model, tok, cfg, "ep-0", "g-0")


async def test_bash_command_with_copied_replacement_char_runs(tok, sandbox):
    fix = "sed -i 's/caf\ufffd/café/' menu.py"
    script = ["```bash\ncat menu.py\n```", f"```bash\n{fix}\n```", SUBMIT]
    traj = await play(tok, sandbox, script)
    assert traj.status == EpisodeStatus.unresolved and traj.reason == "submitted"
    shown, edit, _ = traj.turns
    assert "caf\ufffd" in shown.observation
    assert edit.action == fix and edit.exit_code == 0  # ran, not a format error
    assert sandbox.commands[1] == fix  # the sandbox got the character intact
    assert (sandbox.root / "menu.py").read_text(encoding="utf-8") == "name = 'café'\n"


async def test_tool_call_with_copied_replacement_char_edits(tok, sandbox):
    script = [
        call("view", path="menu.py"),
        call("str_replace", path="menu.py", old_str="caf\ufffd", new_str="café"),
        call("submit"),
    ]
    traj = await play(tok, sandbox, script, scaffold="tools")
    assert traj.status == EpisodeStatus.unresolved and traj.reason == "submitted"
    view, edit, _ = traj.turns
    assert "caf\ufffd" in view.observation
    assert json.loads(edit.action)["arguments"]["old_str"] == "caf\ufffd"
    assert "Format error" not in edit.observation
    assert (sandbox.root / "menu.py").read_bytes() == "name = 'café'\n".encode()


async def test_undecodable_reply_is_format_error_even_after_a_shown_replacement_char(tok, sandbox):
    emoji = tok.encode("😀")
    assert len(emoji) > 1  # several byte-level tokens: one alone is an incomplete sequence
    bad = [*tok.encode("```bash\necho caf"), emoji[0], *tok.encode("\n```"), tok.im_end_id]
    assert "\ufffd" in tok.decode(bad)
    script = ["```bash\ncat menu.py\n```", ScriptedReply(ids=bad), SUBMIT]
    traj = await play(tok, sandbox, script)
    shown, broken, _ = traj.turns
    assert "caf\ufffd" in shown.observation
    assert broken.action == "" and "not valid UTF-8" in broken.observation
    assert broken.observation.startswith("Format error")
    assert sandbox.commands == ["cat menu.py", f"echo {SUBMIT_SENTINEL}"]


def test_valid_utf8_tells_written_from_undecodable_replacement_chars(tok):
    written = tok.encode("x = 'caf\ufffd'")
    emoji = tok.encode("😀")
    assert tok.is_valid_utf8(written) and "\ufffd" in tok.decode(written)
    assert not tok.is_valid_utf8(emoji[:1])
    assert not tok.is_valid_utf8([*emoji[:1], *written])  # bad bytes, then a written U+FFFD
    assert tok.is_valid_utf8([tok.im_start_id, *emoji, tok.im_end_id])


def test_raw_bytes_agree_with_the_backend_decode(tok):
    """`raw_bytes` reproduces the backend's byte-level decoding: decoding its bytes with
    errors="replace" gives `decode`'s text for arbitrary id sequences."""
    rng = random.Random(0)
    for _ in range(300):
        ids = [rng.randrange(tok.vocab_size) for _ in range(rng.randrange(1, 12))]
        raw = tok.raw_bytes(ids)
        assert raw is not None
        assert raw.decode("utf-8", errors="replace") == tok.decode(ids)
        assert tok.is_valid_utf8(ids) == _valid(raw)


def test_vocab_without_byte_level_decoder_counts_any_replacement_char(tmp_path):
    """Without a byte-level vocabulary the bytes are unknown: any U+FFFD counts (old rule)."""
    from swefleet.agents.tokenizer import Tokenizer
    from tokenizers import Tokenizer as Backend
    from tokenizers import models, pre_tokenizers

    vocab = {"<|im_start|>": 0, "<|im_end|>": 1, "caf": 2, "\ufffd": 3, "ok": 4, "[UNK]": 5}
    backend = Backend(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = Tokenizer(backend)
    assert tok.raw_bytes([2, 4]) is None
    assert tok.is_valid_utf8([2, 4]) and not tok.is_valid_utf8([2, 3])


def _valid(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
