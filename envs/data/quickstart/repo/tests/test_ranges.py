import pytest
from textkit import format_ranges, parse_ranges


def test_parse_simple():
    assert parse_ranges("1-3,7") == [1, 2, 3, 7]


def test_parse_sorts_and_deduplicates():
    assert parse_ranges("5,1-3,2") == [1, 2, 3, 5]


def test_parse_rejects_descending():
    with pytest.raises(ValueError):
        parse_ranges("5-2")


def test_parse_whitespace_and_empty_items():
    assert parse_ranges(" 1 - 3 , 7 ") == [1, 2, 3, 7]
    assert parse_ranges("1-3,") == [1, 2, 3]
    assert parse_ranges("4,,6") == [4, 6]
    assert parse_ranges("") == []


def test_format_runs():
    assert format_ranges([1, 2, 3, 5, 6]) == "1-3,5-6"


def test_format_unsorted_input():
    assert format_ranges([12, 10, 11, 11]) == "10-12"


def test_format_isolated_numbers():
    assert format_ranges([7]) == "7"
    assert format_ranges([1, 2, 3, 7, 9, 10]) == "1-3,7,9-10"


@pytest.mark.parametrize("text", ["1-3", "1-3,5-9", "2-4,10-11"])
def test_roundtrip(text):
    assert format_ranges(parse_ranges(text)) == text
