"""Where pulled models live, and how one gets there atomically.

`$SWEFLEET_CACHE/models/<name>/` (default `~/.cache/swefleet`) holds `hf/` (the Hugging Face
folder that `[model] name` resolves to), `<name>.gguf` (the verified GGUF that `swefleet models
export` cuts into parts) and `source.json` (the catalogue entry and how the model arrived). A
model is built in `models/.tmp-<name>-XXXX/` and renamed into place once complete: the cache
holds a whole model or none, and a failed pull leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HF_DIR = "hf"
SOURCE_FILE = "source.json"


def models_root() -> Path:
    return Path(os.environ.get("SWEFLEET_CACHE", Path.home() / ".cache" / "swefleet")) / "models"


def model_dir(name: str) -> Path:
    return models_root() / name


def hf_dir(name: str) -> Path:
    return model_dir(name) / HF_DIR


def gguf_path(name: str) -> Path:
    return model_dir(name) / f"{name}.gguf"


def is_cached(name: str) -> bool:
    return (hf_dir(name) / "config.json").is_file()


def cached_hf_dir(name: str) -> Path:
    """The cached Hugging Face folder of `name`; ValueError that says how to get it."""
    if not is_cached(name):
        raise ValueError(f"{name} is not cached (no {hf_dir(name)}): run "
                         f"`swefleet models pull {name}` (or `swefleet models import DIR`)")
    return hf_dir(name)


def read_source(name: str) -> dict:
    path = model_dir(name) / SOURCE_FILE
    return json.loads(path.read_text()) if path.is_file() else {}


@contextmanager
def staging(name: str) -> Iterator[Path]:
    """A fresh folder next to the cache entry; renamed to `model_dir(name)` when the block ends
    normally (replacing an older copy), removed when it raises."""
    root = models_root()
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=root))
    mask = os.umask(0)
    os.umask(mask)
    tmp.chmod(0o777 & ~mask)  # mkdtemp's 0700 would stay on the cached folder
    try:
        yield tmp
        final = model_dir(name)
        if final.exists():  # a forced pull: the old copy goes only once the new one is whole
            old = Path(tempfile.mkdtemp(prefix=f".old-{name}-", dir=root))
            final.rename(old / "m")
            shutil.rmtree(old)
        tmp.rename(final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
