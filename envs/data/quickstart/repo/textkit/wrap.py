"""Word wrapping and truncation for plain text."""

from __future__ import annotations


def wrap(text: str, width: int = 70) -> list[str]:
    """Greedy word wrap.

    Words are separated by any whitespace; each line holds whole words joined by one space and
    is at most `width` characters long. A word longer than `width` gets a line of its own and
    is never split.
    """
    if width < 1:
        raise ValueError(f"width must be positive, got {width}")
    lines: list[str] = []
    current = ""
    for word in text.split():
        if not current:
            current = word
        elif len(current) + 1 + len(word) <= width:
            current += " " + word
        else:
            lines.append(current)
            current = word
    if current:
        lines.append(current)
    return lines


def fill(text: str, width: int = 70) -> str:
    """`wrap` joined with newlines."""
    return "\n".join(wrap(text, width))


def truncate(text: str, width: int, placeholder: str = "...") -> str:
    """Shorten `text` to at most `width` characters.

    Text that fits is returned unchanged. Otherwise it is cut, trailing whitespace of the kept
    part is dropped, and `placeholder` is appended; the result never exceeds `width`.
    """
    if width < 0:
        raise ValueError(f"width must not be negative, got {width}")
    if len(text) <= width:
        return text
    if width <= len(placeholder):
        return placeholder[:width]
    return text[: width - len(placeholder)].rstrip() + placeholder
