"""Image layers (the `layer.tar`s of `docker save`) compressed for a bundle and applied to a
root filesystem without Docker: whiteouts (`.wh.<name>`, `.wh..wh..opq`) remove what lower
layers put there, then GNU tar extracts the rest (it replaces a file by unlinking it first, so
a tree made with `cp -al` from a parent keeps the parent's files intact).
"""

from __future__ import annotations

import gzip
import lzma
import os
import posixpath
import shutil
import subprocess
import tarfile
from pathlib import Path
from typing import BinaryIO

from swefleet.envs.bwrap.pack import BundleError

COMPRESSORS = {"xz": ["xz", "-T0", "-6", "-c"], "zstd": ["zstd", "-q", "-3", "-T0", "-c"],
               "gzip": ["gzip", "-9", "-c"]}
WHITEOUT, OPAQUE = ".wh.", ".wh..wh..opq"


def default_compression() -> str:
    """xz: every target can undo it (Python's `lzma`), where `zstd` may be missing."""
    return "xz"


def compress(src: Path, dest: Path, method: str) -> None:
    with open(src, "rb") as i, open(dest, "wb") as o:
        res = subprocess.run(COMPRESSORS[method], stdin=i, stdout=o, stderr=subprocess.PIPE,
                             check=False)
    if res.returncode:
        raise BundleError(f"{method} failed on {src}: {res.stderr.decode(errors='replace')}")


def decompress(blob: BinaryIO, dest: Path, method: str) -> None:
    """Decompress the stream `blob` into the file `dest` (xz/gzip in Python, zstd with the
    `zstd` program)."""
    with open(dest, "wb") as out:
        if method == "zstd":
            if shutil.which("zstd") is None:
                raise BundleError("this bundle is zstd-compressed and `zstd` is not installed "
                                  "here: export it again with --compress xz")
            proc = subprocess.Popen(["zstd", "-q", "-d", "-c"], stdin=subprocess.PIPE,
                                    stdout=out, stderr=subprocess.PIPE)
            try:
                shutil.copyfileobj(blob, proc.stdin, 1 << 20)
            finally:
                proc.stdin.close()
                err = proc.stderr.read()
                proc.wait()
            if proc.returncode:
                raise BundleError(f"zstd: {err.decode(errors='replace').strip()}")
            return
        opener = {"xz": lzma.open, "gzip": gzip.open}.get(method)
        if opener is None:
            raise BundleError(f"unknown compression {method!r}")
        try:
            with opener(blob) as f:
                shutil.copyfileobj(f, out, 1 << 20)
        except (lzma.LZMAError, OSError, EOFError) as e:
            if isinstance(e, BundleError):
                raise
            raise BundleError(f"cannot decompress a layer ({method}): {e}") from e


def _safe(root: Path, name: str) -> Path:
    """`root/name` for a member name that stays inside `root` (no `..`, no absolute path,
    no symlink on the way out)."""
    norm = posixpath.normpath(name or ".")
    if norm.startswith("../") or norm == ".." or posixpath.isabs(norm):
        raise BundleError(f"layer member {name!r} points outside the root filesystem")
    if norm == ".":
        return root
    path = root / norm
    parent = Path(os.path.realpath(path.parent))
    if parent != root.resolve() and root.resolve() not in parent.parents:
        raise BundleError(f"layer member {name!r} leads outside the root filesystem")
    return path


def _remove(path: Path) -> None:
    if path.is_symlink() or not path.is_dir():
        path.unlink(missing_ok=True)
    else:
        shutil.rmtree(path)


def apply_layer(layer_tar: Path, root: Path) -> None:
    """Apply one uncompressed layer tar to `root` (a directory, possibly a hardlinked copy of
    the lower layers)."""
    try:
        with tarfile.open(layer_tar, "r:") as tar:
            names = tar.getnames()
    except tarfile.TarError as e:
        raise BundleError(f"{layer_tar}: not a tar archive: {e}") from e
    for name in names:
        base = posixpath.basename(name.rstrip("/"))
        if not base.startswith(WHITEOUT):
            continue
        parent = _safe(root, posixpath.dirname(name.rstrip("/")) or ".")
        if base == OPAQUE:
            if parent.is_dir() and not parent.is_symlink():
                for child in parent.iterdir():
                    _remove(child)
        else:
            target = _safe(root, posixpath.join(posixpath.dirname(name), base[len(WHITEOUT):]))
            if target.exists() or target.is_symlink():
                _remove(target)
    owner = ["--same-owner", "--numeric-owner"] if os.getuid() == 0 else [
        "--no-same-owner", "--anchored", "--exclude", "dev/*", "--exclude", "./dev/*",
        "--no-anchored"]  # (device nodes need root; bwrap mounts its own /dev anyway)
    res = subprocess.run(["tar", "-x", "-p", *owner, "--exclude", f"{WHITEOUT}*", "-f",
                          str(layer_tar), "-C", str(root)], capture_output=True, check=False)
    if res.returncode:
        raise BundleError(f"unpacking a layer: {res.stderr.decode(errors='replace')[-500:]}")
