"""Fetch a recipe's sdist (and pure-Python wheels) with pip, checked, cached on the host.

pip runs here, on the host, at image-build time (it uses the host's pip configuration and CA
bundle); the Docker build that unpacks the files then runs with the network off. Files are
cached under `$SWEFLEET_CACHE/sdists` (default `~/.cache/swefleet`), keyed by name, version
and hash, so a package is downloaded once per machine.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from swefleet.envs.synth.recipe import Recipe

log = logging.getLogger(__name__)
_PIP = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
        "--quiet"]


class FetchError(RuntimeError):
    """pip could not download the file, or it is not the pinned one."""


def cache_root() -> Path:
    root = Path(os.environ.get("SWEFLEET_CACHE", Path.home() / ".cache" / "swefleet"))
    path = root / "sdists"
    path.mkdir(parents=True, exist_ok=True)
    return path


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch_sdist(recipe: Recipe) -> Path:
    """The pinned sdist file (downloaded once, sha256 checked every time)."""
    slot = cache_root() / f"{recipe.package}-{recipe.version}-{recipe.sha256[:12]}"
    found = sorted(slot.glob("*.tar.gz")) if slot.is_dir() else []
    if found and sha256_of(found[0]) == recipe.sha256:
        return found[0]
    with tempfile.TemporaryDirectory(prefix="swefleet-pip-") as tmp:
        req = Path(tmp) / "requirements.txt"
        req.write_text(f"{recipe.package}=={recipe.version} --hash=sha256:{recipe.sha256}\n")
        _pip([*_PIP, "--no-binary", ":all:", "--require-hashes", "-r", str(req),
              "-d", f"{tmp}/out"], recipe.package)
        return _keep(Path(tmp) / "out", slot, recipe.sha256)


def fetch_wheels(recipe: Recipe) -> list[Path]:
    """The recipe's pure-Python wheels (`py3-none-any`), each downloaded once."""
    paths = []
    for spec in recipe.wheels:
        slot = cache_root() / f"wheel-{spec.replace('==', '-')}"
        found = sorted(slot.glob("*.whl")) if slot.is_dir() else []
        if not found:
            with tempfile.TemporaryDirectory(prefix="swefleet-pip-") as tmp:
                _pip([*_PIP, "--only-binary", ":all:", "--implementation", "py",
                      "--python-version", "3.11", "--abi", "none", "--platform", "any",
                      spec, "-d", f"{tmp}/out"], spec)
                found = [_keep(Path(tmp) / "out", slot, None)]
        paths.append(found[0])
    return paths


def _pip(cmd: list[str], what: str) -> None:
    log.info("pip download %s", what)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise FetchError(f"pip could not download {what}: {proc.stderr.strip()[-2000:]}")


def _keep(out: Path, slot: Path, sha256: str | None) -> Path:
    files = sorted(p for p in out.iterdir() if p.is_file()) if out.is_dir() else []
    if len(files) != 1:
        raise FetchError(f"expected one downloaded file in {out}, got {[p.name for p in files]}")
    if sha256 is not None and sha256_of(files[0]) != sha256:
        raise FetchError(f"{files[0].name}: sha256 {sha256_of(files[0])} != pinned {sha256}")
    tmp_slot = slot.with_name(slot.name + f".tmp-{os.getpid()}")
    shutil.rmtree(tmp_slot, ignore_errors=True)
    tmp_slot.mkdir(parents=True)
    shutil.copy2(files[0], tmp_slot / files[0].name)
    shutil.rmtree(slot, ignore_errors=True)
    os.replace(tmp_slot, slot)
    return slot / files[0].name


def read_sdist(path: Path) -> dict[str, bytes]:
    """The regular files of an sdist tarball, keyed by path relative to its top folder."""
    out: dict[str, bytes] = {}
    with tarfile.open(path) as tar:
        for member in tar.getmembers():
            if not member.isfile():
                continue
            parts = PurePosixPath(member.name).parts[1:]
            if not parts or ".." in parts:
                continue
            data = tar.extractfile(member)
            if data is not None:
                out["/".join(parts)] = data.read()
    return out
