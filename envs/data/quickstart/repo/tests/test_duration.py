import pytest
from textkit import format_duration, parse_duration


def test_parse_seconds_minutes_hours():
    assert parse_duration("90s") == 90
    assert parse_duration("1h30m") == 5400
    assert parse_duration(" 2H 5M ") == 7500


def test_parse_weeks():
    assert parse_duration("1w") == 604800


@pytest.mark.parametrize("text", ["", "abc", "10", "5x", "1h_junk", "h1"])
def test_parse_rejects_garbage(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_format_zero():
    assert format_duration(0) == "0s"


def test_format_mixed():
    assert format_duration(3661) == "1h 1m 1s"
    assert format_duration(7200) == "2h"


def test_format_rejects_negative():
    with pytest.raises(ValueError):
        format_duration(-1)


@pytest.mark.parametrize("seconds", [1, 59, 61, 3600, 90061, 694861])
def test_roundtrip(seconds):
    assert parse_duration(format_duration(seconds)) == seconds


def test_parse_days():
    assert parse_duration("2d") == 172800
    assert parse_duration("1d 12h") == 129600


def test_format_days():
    assert format_duration(86400) == "1d"
    assert format_duration(93784) == "1d 2h 3m 4s"
