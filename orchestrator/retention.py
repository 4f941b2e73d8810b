"""Disk budget of published weights: a run publishes one full checkpoint per step (a 0.6B model
in fp32 is ~2 GB: 30 steps fill a small disk), but only the newest versions are ever loaded
again (servers, a restarted server, a resumed trainer). Older ones are deleted once a newer
version is served everywhere; every `keep_every`-th version stays for later evaluation. A
version the trainer is still making durable (newer than the newest with a `.durable` marker:
`trainer/export.py` marks them in order) and the newest durable one (where a resume after a
machine crash starts) always stay."""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

from swefleet.rundir import is_durable

log = logging.getLogger(__name__)

_VERSION_DIR = re.compile(r"^v(\d{6,})$")


def prune_weights(weights_dir: Path, served: int, keep_last: int, keep_every: int = 0) -> list[int]:
    """Delete `weights_dir/vNNNNNN/` for versions older than the newest `keep_last` up to
    `served` (0 keeps everything), except multiples of `keep_every` (> 0) and version 0 is never
    there to delete (the starting model lives elsewhere). Returns the versions deleted."""
    if keep_last <= 0 or not weights_dir.is_dir():
        return []
    oldest_kept = served - keep_last + 1
    found = {int(m.group(1)): entry for entry in weights_dir.iterdir()
             if (m := _VERSION_DIR.match(entry.name)) and entry.is_dir()}
    # the newest directory stays whatever its age: with weight sync by broadcast most versions
    # are no directory, and a restart reloads the newest one that is (RunDir.reloadable_version)
    newest = max(found, default=0)
    # no marker at all: written before them (all count as durable) or none made durable yet
    newest_durable = max((v for v, entry in found.items() if is_durable(entry)), default=0)
    deleted = []
    for version, entry in found.items():
        if version >= min(oldest_kept, newest_durable or newest) or version == newest or (
                keep_every > 0 and version % keep_every == 0):
            continue
        shutil.rmtree(entry, ignore_errors=True)
        deleted.append(version)
    if deleted:
        log.debug("pruned weights %s", sorted(deleted))
    return sorted(deleted)
