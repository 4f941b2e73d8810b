"""URL slugs from arbitrary titles."""

from __future__ import annotations

import re
import unicodedata

_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def _ascii(text: str) -> str:
    """Drop accents and anything else that has no ASCII form."""
    decomposed = unicodedata.normalize("NFKD", text)
    return decomposed.encode("ascii", "ignore").decode("ascii")


def slugify(text: str, sep: str = "-", max_length: int | None = None) -> str:
    """Lowercase ASCII slug of `text`.

    Accents are stripped, and every run of characters other than letters and digits becomes
    one `sep`. With `max_length`, a longer slug is cut at the last separator that fits, so
    words are never split; a first word longer than `max_length` is cut hard.
    """
    if not sep:
        raise ValueError("sep must not be empty")
    slug = _NON_ALNUM.sub(sep, _ascii(text).lower()).strip(sep)
    if max_length is not None and len(slug) > max_length:
        head, found, _ = slug[: max_length + 1].rpartition(sep)
        slug = head if found and head else slug[:max_length]
    return slug
