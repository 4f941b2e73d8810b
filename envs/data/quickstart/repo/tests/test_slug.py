import pytest
from textkit import slugify


def test_basic():
    assert slugify("Hello World") == "hello-world"


def test_strips_accents():
    assert slugify("Crème Brûlée à la carte") == "creme-brulee-a-la-carte"


def test_collapses_punctuation_and_trims():
    assert slugify("  --Hello,   World!!  ") == "hello-world"


def test_custom_separator():
    assert slugify("Hello big World", sep="_") == "hello_big_world"


def test_empty_separator_rejected():
    with pytest.raises(ValueError):
        slugify("x", sep="")


def test_max_length_cuts_at_word_boundary():
    assert slugify("The quick brown fox jumps", max_length=15) == "the-quick-brown"
    assert slugify("The quick brown fox jumps", max_length=13) == "the-quick"


def test_max_length_keeps_short_slug():
    assert slugify("Hello World", max_length=50) == "hello-world"
    assert slugify("Hello World", max_length=11) == "hello-world"


def test_max_length_single_long_word():
    assert slugify("Supercalifragilistic", max_length=5) == "super"
