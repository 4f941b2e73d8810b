"""`[model] name`: a catalogue name resolves to its cached folder where the config is loaded,
with one-line errors for an unknown name, a name not cached, and a name with a path; and
`swefleet models list` runs (without importing torch)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from swefleet.app.cli import main
from swefleet.app.config import RunConfig, check_model_path, load_config
from swefleet.models import cache
from swefleet.models.catalogue import CATALOGUE

pytestmark = pytest.mark.unit

NAME = "qwen2.5-coder-1.5b-instruct"
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("SWEFLEET_CACHE", str(tmp_path))
    return tmp_path


def _cache(name: str) -> Path:
    folder = cache.hf_dir(name)
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen2"}))
    return folder


def _config(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(body)
    return path


def test_a_cached_name_becomes_the_model_path(home):
    folder = _cache(NAME)
    cfg = load_config(_config(home, f'[model]\nname = "{NAME}"\n'), topology=False)
    assert (cfg.model.name, cfg.model.path) == (NAME, str(folder))
    check_model_path(cfg.model)
    saved = RunConfig.model_validate_json(cfg.model_dump_json())  # a run's saved config
    assert saved == cfg
    assert load_config("", [f'model.name="{NAME}"', f'model.path="{folder}"'],
                       topology=False).model.path == str(folder)


def test_a_name_not_cached_loads_but_a_run_says_how_to_pull_it(home):
    cfg = load_config(_config(home, f'[model]\nname = "{NAME}"\n'), topology=False)
    assert cfg.model.name == NAME and cfg.model.path == ""  # config show / plan work anywhere
    with pytest.raises(ValueError) as e:
        check_model_path(cfg.model)  # never the random-init model in its place
    assert str(e.value).count("\n") == 0
    assert f"model.name: {NAME} is not cached" in str(e.value)
    assert f"`swefleet models pull {NAME}`" in str(e.value)


def test_an_unknown_name_lists_the_catalogue(home):
    with pytest.raises(ValueError, match=r"run\.toml: model\.name: .*unknown model 'gpt-9'; the "
                                         r"catalogue has: qwen2\.5-coder-0\.5b-instruct, "):
        load_config(_config(home, '[model]\nname = "gpt-9"\n'), topology=False)


@pytest.mark.parametrize("extra", ['path = "/some/ckpt"', "create = true"])
def test_name_with_path_or_create_is_an_error(home, extra):
    _cache(NAME)
    with pytest.raises(ValueError, match=r"model\.name \(qwen2\.5-coder-1\.5b-instruct\) and "
                                         r"model\.path/model\.create are both set: give one"):
        load_config(_config(home, f'[model]\nname = "{NAME}"\n{extra}\n'), topology=False)


def test_the_cli_reports_a_name_not_cached_in_one_line(home, capsys):
    rc = main(["rl", "--config", str(_config(home, f'[model]\nname = "{NAME}"\n'))])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and f"swefleet models pull {NAME}" in err


def test_models_list_shows_the_catalogue_and_the_cache(home, capsys):
    folder = _cache(NAME)
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    for entry in CATALOGUE.values():
        assert entry.name in out and entry.sha256[:16] in out and entry.licence in out
    assert f"cached: {folder}" in out
    assert "cached: no (swefleet models pull qwen2.5-coder-0.5b-instruct)" in out


def test_models_list_runs_without_torch(home):
    code = ("import sys; from swefleet.app.cli import main; rc = main(['models', 'list']); "
            "assert 'torch' not in sys.modules and 'transformers' not in sys.modules; "
            "sys.exit(rc)")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    assert NAME in proc.stdout
