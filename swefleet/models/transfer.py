"""Moving a model to a machine with no index: `swefleet models export` cuts the verified GGUF
(3.2x smaller than the bf16 folder) into parts of a bounded size plus `manifest.json` (each
part's sha256 and the whole file's); `swefleet models import` checks every part, joins them,
verifies the whole against the catalogue and converts it into that machine's cache."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from swefleet.models import cache
from swefleet.models.assemble import CHUNK, check, file_part, join
from swefleet.models.catalogue import entry as catalogue_entry
from swefleet.models.progress import Steps
from swefleet.models.pull import finish

MANIFEST = "manifest.json"


def export(name: str, out: Path, steps: Steps, part_mib: float = 58.0) -> Path:
    """Write the cached, verified GGUF of `name` into the empty (or new) folder `out` as parts of
    at most `part_mib` MiB and a manifest; the manifest's path."""
    entry = catalogue_entry(name)
    src = cache.gguf_path(name)
    if not src.is_file():
        raise ValueError(f"model {name} is not cached: run `swefleet models pull {name}` first")
    if out.exists() and any(out.iterdir()):
        raise ValueError(f"{out} is not empty: export into a new folder")
    limit = int(part_mib * 2**20)
    if limit < 1:
        raise ValueError(f"--part-mib {part_mib}: must be > 0")
    out.mkdir(parents=True, exist_ok=True)
    parts: list[dict] = []
    whole = hashlib.sha256()
    try:
        with steps.step("export (split + sha256)", total=src.stat().st_size) as advance, \
                src.open("rb") as f:
            while chunk := f.read(min(CHUNK, limit)):
                part = {"file": f"{entry.gguf_name}.part{len(parts) + 1:03d}", "size": 0}
                digest = hashlib.sha256()
                with (out / part["file"]).open("wb") as dst:
                    while chunk:
                        for h in (digest, whole):
                            h.update(chunk)
                        dst.write(chunk)
                        part["size"] += len(chunk)
                        advance(len(chunk))
                        chunk = f.read(min(CHUNK, limit - part["size"]))
                parts.append({**part, "sha256": digest.hexdigest()})
        check(entry, sum(p["size"] for p in parts), whole.hexdigest())  # the cache is intact
    except BaseException:
        for p in parts:
            (out / p["file"]).unlink(missing_ok=True)
        raise
    manifest = {"name": name, "size": entry.size, "sha256": entry.sha256, "part_bytes": limit,
                "parts": parts}
    tmp = out / f".{MANIFEST}.tmp"
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, out / MANIFEST)
    return out / MANIFEST


def read_manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    if not path.is_file():
        raise ValueError(f"{folder} has no {MANIFEST} (not a `swefleet models export` folder)")
    try:
        manifest = json.loads(path.read_text())
        manifest["parts"] = [{"file": str(p["file"]), "size": int(p["size"]),
                              "sha256": str(p["sha256"])} for p in manifest["parts"]]
        return manifest
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}: not a valid manifest ({type(e).__name__}: {e})") from None


def import_(folder: Path, steps: Steps, force: bool = False) -> Path:
    """Join, verify and convert the export in `folder` into this machine's cache; the cached
    Hugging Face folder. A missing, short or corrupted part is refused (ValueError), caching
    nothing."""
    manifest = read_manifest(folder)
    entry = catalogue_entry(manifest["name"])
    if (manifest.get("size"), manifest.get("sha256")) != (entry.size, entry.sha256):
        raise ValueError(f"{folder / MANIFEST}: its size/sha256 are not the catalogue's for "
                         f"{entry.name}: refused")
    for part in manifest["parts"]:
        path = folder / part["file"]
        if not path.is_file():
            raise ValueError(f"{folder}: part {part['file']} is missing: refused")
        if path.stat().st_size != part["size"]:
            raise ValueError(f"{folder}: part {part['file']} is {path.stat().st_size:,} bytes, the "
                             f"manifest says {part['size']:,}: refused (an incomplete copy?)")
    if cache.is_cached(entry.name) and not force:
        return cache.hf_dir(entry.name)
    with cache.staging(entry.name) as tmp:
        parts = [file_part(folder / p["file"], p["sha256"]) for p in manifest["parts"]]
        join(parts, tmp / entry.gguf_name, entry, steps)
        finish(entry, tmp, steps, via="import")
    return cache.hf_dir(entry.name)
