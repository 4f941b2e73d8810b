"""A Hugging Face tokenizer loaded with the light `tokenizers` library (no transformers/torch).

Reads `tokenizer.json` (and `tokenizer_config.json` for the eos token) from a checkpoint dir.
`encode` treats its input as plain text: special-token strings inside it (e.g. a file that
contains `<|im_end|>`) are NOT turned into special ids, so observations cannot inject chat
structure. Structural tokens are inserted by id (see `agents.chat`).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tokenizers import Tokenizer as Backend

IM_START = "<|im_start|>"
IM_END = "<|im_end|>"


class Tokenizer:
    """Byte-exact encode/decode plus the chat special token ids."""

    def __init__(self, backend: Backend, eos_token: str | None = None) -> None:
        self._tok = backend
        self._tok.encode_special_tokens = True
        self.im_start_id = self._require_id(IM_START)
        self.im_end_id = self._require_id(IM_END)
        self.eos_id = self._require_id(eos_token) if eos_token else self.im_end_id

    @classmethod
    def from_dir(cls, path: str | Path) -> Tokenizer:
        """Load `<path>/tokenizer.json`; eos from `tokenizer_config.json` when present."""
        from tokenizers import Tokenizer as Backend

        root = Path(path)
        file = root / "tokenizer.json"
        if not file.is_file():
            raise FileNotFoundError(f"no tokenizer.json in {root}")
        return cls(Backend.from_file(str(file)), eos_token=_eos_from_config(root))

    @property
    def vocab_size(self) -> int:
        return self._tok.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> list[int]:
        """Plain text to ids (no BOS/EOS added, special-token text kept as text)."""
        return self._tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids: list[int]) -> str:
        """Ids to text, special tokens included; invalid UTF-8 shows as U+FFFD."""
        return self._tok.decode(list(ids), skip_special_tokens=False)

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def _require_id(self, token: str) -> int:
        token_id = self._tok.token_to_id(token)
        if token_id is None:
            raise ValueError(f"tokenizer has no token {token!r}")
        return token_id


def _eos_from_config(root: Path) -> str | None:
    """`eos_token` of `tokenizer_config.json` (a string or {"content": ...}), else None."""
    config = root / "tokenizer_config.json"
    if not config.is_file():
        return None
    eos = json.loads(config.read_text()).get("eos_token")
    if isinstance(eos, dict):
        eos = eos.get("content")
    return eos or None
