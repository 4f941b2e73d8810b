"""The config reference: docs/config.md is current, every field is documented, and
`swefleet config show` prints TOML that loads back into the same config."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from pydantic import BaseModel, ConfigDict, Field

from swefleet.app.cli import main
from swefleet.app.config import RunConfig, load_config
from swefleet.app.config_doc import REGENERATE, attribute_docs, markdown, show, undocumented

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_docs_config_md_is_current():
    checked_in = (ROOT / "docs" / "config.md").read_text(encoding="utf-8")
    assert checked_in == markdown(), f"docs/config.md is out of date: run `{REGENERATE}`"


def test_every_config_field_has_a_doc():
    missing = list(undocumented(RunConfig))
    assert missing == [], f"config fields without a docstring: {missing}"


class _Inner(BaseModel):
    """Inner section."""

    model_config = ConfigDict(extra="forbid")

    depth: int = 2
    """How deep."""


class _Outer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = "x"
    """The name,
    on two lines."""
    bare: int = 0
    described: float = Field(1.5, description="From Field.")
    inner: _Inner = Field(default_factory=_Inner)
    many: list[_Inner] = Field(default_factory=lambda: [_Inner(), _Inner(depth=3)])
    """Several inner sections."""


def test_docs_come_from_attribute_docstrings_and_missing_ones_are_listed():
    assert attribute_docs(_Outer)["name"] == "The name,\non two lines."
    assert list(undocumented(_Outer)) == ["bare"]  # `inner` takes its class docstring
    md = markdown(_Outer)
    assert "- **`name`** (`str`, default `\"x\"`): The name, on two lines." in md
    assert "- **`described`** (`float`, default `1.5`): From Field." in md
    assert "## `[inner]`" in md and "## `[[many]]`" in md and "How deep." in md


def test_show_of_a_test_model_lists_tables_and_arrays_of_tables():
    text = show(_Outer(many=[_Inner(depth=7)]))
    assert "# The name, on two lines.\nname = \"x\"" in text
    assert "[inner]" in text and text.count("[[many]]") == 1
    assert tomllib.loads(text) == {"name": "x", "bare": 0, "described": 1.5,
                                   "inner": {"depth": 2}, "many": [{"depth": 7}]}


@pytest.mark.parametrize("config", sorted(p.name for p in (ROOT / "configs").glob("*.toml")))
def test_show_loads_back_into_the_same_config(config):
    cfg = load_config(ROOT / "configs" / config, topology=False)
    assert RunConfig.model_validate(tomllib.loads(show(cfg))) == cfg


def test_config_show_cli_merges_file_and_overrides(capsys):
    rc = main(["config", "show", "--config", str(ROOT / "configs" / "quickstart.toml"),
               "--set", "orchestrator.steps=7"])
    out = capsys.readouterr().out
    assert rc == 0
    data = tomllib.loads(out)
    assert data["name"] == "quickstart" and data["orchestrator"]["steps"] == 7
    assert "# Seed of the random init.\nseed = 0" in out


def test_config_show_cli_reports_a_bad_field_in_one_line(capsys):
    assert main(["config", "show", "--set", "model.nope=1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "model.nope" in err
