"""Prompt templates (`agents/prompts/*.j2`, jinja2) and text shaping for the model."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import jinja2

PROMPTS_DIR = Path(__file__).parent / "prompts"


@cache
def _environment(directory: str) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(directory),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=False,
        autoescape=False,
    )


def render(name: str, directory: Path = PROMPTS_DIR, **values: object) -> str:
    """Render template `name` (e.g. `bash/system.j2`); a missing variable is an error."""
    return _environment(str(directory)).get_template(name).render(**values)


def truncate_middle(text: str, max_chars: int) -> tuple[str, int]:
    """Keep the head and tail of `text` within about `max_chars`, with a marker in the middle.

    Returns (text, elided character count); the text is unchanged when it fits.
    """
    if len(text) <= max_chars:
        return text, 0
    head = max_chars // 2
    tail = max_chars - head
    elided = len(text) - head - tail
    marker = f"\n[... {elided} characters elided ...]\n"
    return text[:head] + marker + text[len(text) - tail :], elided


def strip_thinking(text: str) -> str:
    """Only the text after a closed `<think>...</think>` holds the action; an unclosed
    `<think>` means everything after it is thinking."""
    if "</think>" in text:
        return text.rpartition("</think>")[2]
    return text.partition("<think>")[0]
