"""The command line's front matter: `--version`, defaults and examples in every `--help`, and
a `model.path` that names no checkpoint as a one-line config error."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from swefleet import __version__
from swefleet.app.cli import build_parser, main, subparsers
from swefleet.app.config import ModelConfig, check_model_path

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def test_version(capsys):
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"swefleet {__version__}"


def test_every_command_help_has_examples_and_a_description():
    commands = list(subparsers(build_parser()))
    assert {"", "rl", "eval", "config show", "report compare"} <= {w for w, _ in commands}
    for words, parser in commands:
        text = parser.format_help()
        assert "examples:\n  swefleet " in text, f"`swefleet {words} --help` has no example"
        assert parser.description, f"`swefleet {words} --help` has no description"


def test_help_shows_non_empty_defaults_only():
    by_words = dict(subparsers(build_parser()))
    text = " ".join(by_words["tasks generate"].format_help().split())
    assert "tasks per package (default: 12)" in text
    assert "orders the candidate bugs (default: 0)" in text
    rl = " ".join(by_words["rl"].format_help().split())
    assert "(default: )" not in rl and "(default: [])" not in rl and "(default: None)" not in rl


def _checkpoint(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    return path


def test_model_path_must_hold_a_checkpoint_unless_create_is_set(tmp_path):
    check_model_path(ModelConfig())  # empty: the run creates its model under the run dir
    check_model_path(ModelConfig(path=str(_checkpoint(tmp_path / "ckpt"))))
    check_model_path(ModelConfig(path=str(tmp_path / "new"), create=True))
    with pytest.raises(ValueError, match=r"^model\.path: .*missing does not exist"):
        check_model_path(ModelConfig(path=str(tmp_path / "missing")))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"^model\.path: .*empty has no config\.json"):
        check_model_path(ModelConfig(path=str(tmp_path / "empty")))


def test_rl_with_a_missing_model_path_stops_with_one_line(tmp_path, capsys):
    missing = tmp_path / "no-such-model"
    rc = main(["rl", "--config", str(ROOT / "configs" / "learning_sanity.toml"),
               "--output-dir", str(tmp_path / "run"), "--set", f'model.path="{missing}"'])
    err = capsys.readouterr().err.strip()
    assert rc == 2
    assert err.count("\n") == 0 and err.startswith("swefleet rl: error: model.path: ")
    assert str(missing) in err and not (tmp_path / "run").exists()
