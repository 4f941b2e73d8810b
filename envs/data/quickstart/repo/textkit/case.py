"""Identifier case conversion: snake_case, kebab-case, camelCase."""

from __future__ import annotations

import re

# An acronym (run of capitals not followed by a lowercase letter), a capitalised or lowercase
# word, or a number.
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


def words(name: str) -> list[str]:
    """Split an identifier or phrase into lowercase words: 'parseHTTPResponse' ->
    ['parse', 'http', 'response']."""
    return [w.lower() for w in _WORD.findall(name)]


def snake_case(name: str) -> str:
    """'parseHTTPResponse' -> 'parse_http_response'."""
    return "_".join(words(name))


def kebab_case(name: str) -> str:
    """'parseHTTPResponse' -> 'parse-http-response'."""
    return "-".join(words(name))


def camel_case(name: str) -> str:
    """'parse_http_response' -> 'parseHttpResponse'."""
    parts = words(name)
    if not parts:
        return ""
    return parts[0] + "".join(p.capitalize() for p in parts[1:])
