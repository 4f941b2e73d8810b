"""A Hugging Face tokenizer loaded with the light `tokenizers` library (no transformers/torch).

Reads `tokenizer.json` (and `tokenizer_config.json` for the eos token) from a checkpoint dir.
`encode` treats its input as plain text: special-token strings inside it (e.g. a file that
contains `<|im_end|>`) are NOT turned into special ids, so observations cannot inject chat
structure. Structural tokens are inserted by id (see `agents.chat`).

`decode` is lossy (invalid UTF-8 shows as U+FFFD, as from every server), so a U+FFFD in the
text does not tell a model that wrote U+FFFD (ids for the bytes EF BF BD, e.g. copied from a file
that holds one) from ids whose bytes are not UTF-8. `raw_bytes` / `is_valid_utf8` tell them
apart from the ids: exactly for byte-level vocabularies (Qwen, GPT-2 style; the decoder maps each
token's characters back to bytes), conservatively otherwise (any U+FFFD counts as invalid).
"""

from __future__ import annotations

import json
from functools import cache
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
        self._byte_level = _is_byte_level(backend)
        self._bytes: dict[int, bytes] = {}

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

    def raw_bytes(self, ids: list[int]) -> bytes | None:
        """The bytes `ids` stand for (`decode` is their lossy UTF-8 decoding), special tokens
        included; None when the vocabulary is not byte-level (the bytes are then unknown)."""
        if not self._byte_level:
            return None
        return b"".join(self._token_bytes(i) for i in ids)

    def is_valid_utf8(self, ids: list[int]) -> bool:
        """Whether `ids` stand for valid UTF-8, i.e. every U+FFFD in `decode(ids)` is one the
        model wrote. Without a byte-level vocabulary: whether `decode(ids)` has no U+FFFD."""
        raw = self.raw_bytes(ids)
        if raw is None:
            return "\ufffd" not in self.decode(ids)
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            return False
        return True

    def _token_bytes(self, token_id: int) -> bytes:
        """What the ByteLevel decoder makes of one token: its characters mapped back to bytes,
        or its UTF-8 text when a character is outside the byte alphabet (added tokens)."""
        if token_id not in self._bytes:
            token = self._tok.id_to_token(token_id)
            if token is None:
                raise ValueError(f"token id {token_id} is not in the vocabulary")
            table = _byte_of_char()
            if all(c in table for c in token):
                self._bytes[token_id] = bytes(table[c] for c in token)
            else:
                self._bytes[token_id] = token.encode("utf-8")
        return self._bytes[token_id]

    def token_to_id(self, token: str) -> int | None:
        return self._tok.token_to_id(token)

    def _require_id(self, token: str) -> int:
        token_id = self._tok.token_to_id(token)
        if token_id is None:
            raise ValueError(f"tokenizer has no token {token!r}")
        return token_id


def _is_byte_level(backend: Backend) -> bool:
    from tokenizers import decoders

    return isinstance(backend.decoder, decoders.ByteLevel)


@cache
def _byte_of_char() -> dict[str, int]:
    """Inverse of the GPT-2 byte-to-unicode alphabet the ByteLevel decoder uses."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1)]
    printable += range(ord("®"), ord("ÿ") + 1)
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[chr(byte)] = byte
        else:
            table[chr(256 + extra)] = byte
            extra += 1
    return table


def _eos_from_config(root: Path) -> str | None:
    """`eos_token` of `tokenizer_config.json` (a string or {"content": ...}), else None."""
    config = root / "tokenizer_config.json"
    if not config.is_file():
        return None
    eos = json.loads(config.read_text()).get("eos_token")
    if isinstance(eos, dict):
        eos = eos.get("content")
    return eos or None
