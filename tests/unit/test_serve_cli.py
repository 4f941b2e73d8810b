"""`swefleet serve MODEL` refuses a model that is not here with one line that says how to get
it, before loading anything."""

from __future__ import annotations

import pytest

from swefleet.app.cli import main
from swefleet.app.serve import resolve_model, url

pytestmark = pytest.mark.unit


def _one_line_error(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("swefleet serve: error: "), err
    return err


def test_an_unknown_name_says_how_to_get_a_model(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(["serve", "no-such-model"]) == 2
    err = _one_line_error(capsys)
    assert "no-such-model: no such folder, and not a model of `swefleet models list`" in err
    assert "qwen2.5-coder-0.5b-instruct" in err and "`swefleet models pull NAME`" in err


def test_a_catalogue_name_not_pulled_names_its_pull_command(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("SWEFLEET_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    assert main(["serve", "qwen2.5-coder-0.5b-instruct", "--port", "0"]) == 2
    err = _one_line_error(capsys)
    assert "qwen2.5-coder-0.5b-instruct is not cached" in err
    assert "run `swefleet models pull qwen2.5-coder-0.5b-instruct`" in err


def test_a_folder_without_a_checkpoint_is_refused(capsys, tmp_path):
    (tmp_path / "empty").mkdir()
    assert main(["serve", str(tmp_path / "empty")]) == 2
    assert "empty: no config.json (not a Hugging Face model folder)" in _one_line_error(capsys)


def test_a_cached_catalogue_model_is_served_under_its_name(tmp_path, monkeypatch):
    monkeypatch.setenv("SWEFLEET_CACHE", str(tmp_path))
    hf = tmp_path / "models" / "qwen2.5-coder-0.5b-instruct" / "hf"
    hf.mkdir(parents=True)
    (hf / "config.json").write_text("{}")
    assert resolve_model("qwen2.5-coder-0.5b-instruct") == (hf, ["qwen2.5-coder-0.5b-instruct"])
    assert resolve_model(str(hf)) == (hf, [])  # a folder: served under its own name


def test_url_brackets_ipv6():
    assert url("127.0.0.1", 8000) == "http://127.0.0.1:8000"
    assert url("::1", 8000) == "http://[::1]:8000"
