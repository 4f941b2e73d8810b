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
