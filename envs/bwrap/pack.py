"""The byte container of a rootfs bundle: blobs appended to one pack, split into parts.

    with PackWriter(out_dir, part_bytes) as w:
        ref = w.add(Path("layer.tar.xz"))        # {"offset", "length", "sha256"}
    manifest["parts"] = w.parts                  # [{"name", "size", "sha256"}, ...]

    check_parts(bundle_dir, manifest)            # every part present, whole, right sha256
    with open_blob(bundle_dir, manifest, ref) as f: ...   # a blob read across parts, checked

Parts have a fixed size (the last one shorter), so a bundle moves through channels that limit
file sizes; `check_parts` finds a missing, truncated or corrupted part before anything is
unpacked, and `open_blob` checks each blob's own sha256 when it is read to the end.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Self

PART_PREFIX = "pack."
_CHUNK = 1 << 20


class BundleError(Exception):
    """A bundle (or its manifest) is incomplete, corrupted or not usable here."""


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


class PackWriter:
    """Appends blobs to `pack.000`, `pack.001`, ... of at most `part_bytes` each."""

    def __init__(self, out_dir: Path, part_bytes: int) -> None:
        if part_bytes < 1:
            raise ValueError("part_bytes must be positive")
        self.out_dir, self.part_bytes = out_dir, part_bytes
        self.parts: list[dict] = []
        self.offset = 0
        self._f: io.BufferedWriter | None = None
        self._h = hashlib.sha256()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self._close_part()

    def add(self, blob: Path) -> dict:
        """Append the file `blob`; its place in the pack and its sha256."""
        start, h = self.offset, hashlib.sha256()
        with open(blob, "rb") as f:
            while chunk := f.read(_CHUNK):
                h.update(chunk)
                self._write(chunk)
        return {"offset": start, "length": self.offset - start, "sha256": h.hexdigest()}

    def _write(self, data: bytes) -> None:
        while data:
            if self._f is None or self._f.tell() >= self.part_bytes:
                self._close_part()
                name = f"{PART_PREFIX}{len(self.parts):03d}"
                self.parts.append({"name": name})
                self._f = open(self.out_dir / name, "wb")  # noqa: SIM115 (closed in _close_part)
                self._h = hashlib.sha256()
            n = min(len(data), self.part_bytes - self._f.tell())
            self._f.write(data[:n])
            self._h.update(data[:n])
            self.offset += n
            data = data[n:]

    def _close_part(self) -> None:
        if self._f is not None:
            self.parts[-1].update(size=self._f.tell(), sha256=self._h.hexdigest())
            self._f.close()
            self._f = None


def check_parts(bundle: Path, manifest: dict) -> None:
    """`BundleError` naming the first part that is missing, of the wrong size or sha256, or a
    part list that does not add up to the pack's size."""
    parts = manifest.get("parts")
    if not isinstance(parts, list):
        raise BundleError(f"{bundle}/manifest.json: no part list")
    total = 0
    for part in parts:
        path = bundle / part["name"]
        if not path.is_file():
            raise BundleError(f"{path}: missing (copy every part of the bundle, "
                              f"{len(parts)} in all)")
        size = path.stat().st_size
        if size != part["size"]:
            raise BundleError(f"{path}: {size} bytes, the manifest says {part['size']} "
                              "(truncated or still being copied?)")
        if sha256_file(path) != part["sha256"]:
            raise BundleError(f"{path}: sha256 differs from the manifest (corrupted copy)")
        total += size
    if total != manifest.get("pack_bytes"):
        raise BundleError(f"{bundle}: parts hold {total} bytes, the manifest says "
                          f"{manifest.get('pack_bytes')}")


class BlobReader(io.RawIOBase):
    """One blob read across part files; `BundleError` at its end if its sha256 differs."""

    def __init__(self, bundle: Path, parts: list[dict], ref: dict) -> None:
        self._bundle, self._parts = bundle, parts
        self._pos, self._end = ref["offset"], ref["offset"] + ref["length"]
        self._want, self._h = ref["sha256"], hashlib.sha256()
        self._f = None
        self._f_start = self._f_end = 0
        self._checked = False

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        if self._pos >= self._end:
            self._verify()
            return 0
        if self._f is None or not (self._f_start <= self._pos < self._f_end):
            self._open_at(self._pos)
        n = min(len(buf), self._end - self._pos, self._f_end - self._pos)
        data = self._f.read(n)
        if len(data) != n:
            raise BundleError(f"{self._f.name}: shorter than the manifest says")
        buf[:n] = data
        self._h.update(data)
        self._pos += n
        return n

    def _open_at(self, pos: int) -> None:
        if self._f is not None:
            self._f.close()
        start = 0
        for part in self._parts:
            if start <= pos < start + part["size"]:
                self._f = open(self._bundle / part["name"], "rb")  # noqa: SIM115
                self._f.seek(pos - start)
                self._f_start, self._f_end = start, start + part["size"]
                return
            start += part["size"]
        raise BundleError(f"{self._bundle}: offset {pos} is past the last part")

    def _verify(self) -> None:
        if not self._checked:
            self._checked = True
            if self._h.hexdigest() != self._want:
                raise BundleError(f"{self._bundle}: a blob's sha256 differs from the manifest")

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None
        super().close()


def open_blob(bundle: Path, manifest: dict, ref: dict) -> io.BufferedReader:
    return io.BufferedReader(BlobReader(bundle, manifest["parts"], ref), _CHUNK)
