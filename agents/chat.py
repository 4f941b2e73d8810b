"""ChatML (Qwen-style) as token deltas: the context only ever grows by appending.

Each message is `<|im_start|>{role}\n{content}<|im_end|>\n`; the generation prompt is
`<|im_start|>assistant\n`. Text between special tokens is encoded as one piece, so the ids equal
what a Hugging Face chat template + tokenizer would produce for the same rendered string, except
that special-token text inside content stays text. Structural tokens are inserted by id.
"""

from __future__ import annotations

from swefleet.agents.protocol import ChatTokenizer


class ChatML:
    """Builds the initial prompt and the per-observation deltas, token-exact."""

    def __init__(self, tokenizer: ChatTokenizer) -> None:
        self.tok = tokenizer
        self._newline = tokenizer.encode("\n")

    def message(self, role: str, content: str) -> list[int]:
        """`<|im_start|>{role}\n{content}<|im_end|>\n`."""
        ids = [self.tok.im_start_id, *self.tok.encode(f"{role}\n{content}"), self.tok.im_end_id]
        return ids + self._newline

    def generation_prompt(self) -> list[int]:
        """`<|im_start|>assistant\n`: the model continues from here."""
        return [self.tok.im_start_id, *self.tok.encode("assistant\n")]

    def initial_prompt(self, system: str, user: str) -> list[int]:
        """The whole first prompt: system message, user message, generation prompt."""
        return (
            self.message("system", system) + self.message("user", user) + self.generation_prompt()
        )

    def close_turn(self, completion_ids: list[int]) -> list[int]:
        """Tokens that close the assistant turn the model just generated: `\n` after a
        completion that ended with `<|im_end|>`, else `<|im_end|>\n` (cut by length, or ended
        by another stop token)."""
        if completion_ids and completion_ids[-1] == self.tok.im_end_id:
            return list(self._newline)
        return [self.tok.im_end_id, *self._newline]

    def observation_delta(
        self, completion_ids: list[int], text: str, role: str = "user"
    ) -> list[int]:
        """Everything appended after a completion: turn closer, observation message, and the
        next generation prompt."""
        return self.close_turn(completion_ids) + self.message(role, text) + self.generation_prompt()

    def completion_text(self, completion_ids: list[int]) -> str:
        """Decoded reply without its trailing stop token (what the scaffold parses)."""
        return self.tok.decode(self._reply_ids(completion_ids))

    def completion_is_utf8(self, completion_ids: list[int]) -> bool:
        """Whether the reply (stop token removed) is valid UTF-8; when it is not, its text shows
        U+FFFD where the model produced bytes that decode to nothing."""
        return self.tok.is_valid_utf8(self._reply_ids(completion_ids))

    def _reply_ids(self, completion_ids: list[int]) -> list[int]:
        ids = list(completion_ids)
        if ids and ids[-1] in (self.tok.im_end_id, self.tok.eos_id):
            ids.pop()
        return ids
