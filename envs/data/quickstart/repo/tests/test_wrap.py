import pytest
from textkit import fill, truncate, wrap


def test_wrap_basic():
    assert wrap("the quick brown fox", 10) == ["the quick", "brown fox"]


def test_wrap_normalises_whitespace():
    assert wrap("  one\ttwo \n three  ", 70) == ["one two three"]


def test_wrap_long_word_gets_own_line():
    assert wrap("a extraordinarily b", 5) == ["a", "extraordinarily", "b"]


def test_wrap_empty():
    assert wrap("", 10) == []
    assert wrap("   ", 10) == []


def test_wrap_rejects_bad_width():
    with pytest.raises(ValueError):
        wrap("abc", 0)


def test_wrap_line_exactly_width():
    assert wrap("aaaa bbbbb cc", 10) == ["aaaa bbbbb", "cc"]
    assert wrap("ab cd ef", 5) == ["ab cd", "ef"]


def test_fill():
    assert fill("the quick brown fox", 10) == "the quick\nbrown fox"


def test_truncate_short_text_unchanged():
    assert truncate("hello", 10) == "hello"
    assert truncate("hello", 5) == "hello"


def test_truncate_tiny_width():
    assert truncate("hello world", 2) == ".."


def test_truncate_drops_trailing_space():
    assert truncate("hello world", 9) == "hello..."


def test_truncate_respects_width():
    assert truncate("abcdefghijkl", 8) == "abcde..."
    for width in range(4, 12):
        assert len(truncate("abcdefghijkl", width)) <= width
