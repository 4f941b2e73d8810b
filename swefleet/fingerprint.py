"""A run's fingerprint: what defines it, recorded in its folder, so a folder never mixes the
results of two different runs.

`fingerprint.json` holds a flat mapping (`fingerprint`) of everything that changes results:
the command, the agent, content hashes of the model and the tasks (`swefleet/content_hash.py`),
the selection and the result-changing settings, dotted (`agent.max_steps`); beside it, `about`
says which paths those hashes were taken of (shown in messages, never compared). What each
command records: `swefleet/app/run_fingerprint.py`.

`claim_run_dir` is called when a command starts a folder, before it writes anything there:

- a folder without results (new, or a start that failed before any) gets this fingerprint;
- a folder whose results were made by the same fingerprint resumes;
- any other: `RunMismatch` (a ValueError, so the command line prints one line and exits 2)
  naming what differs; a folder with results but no fingerprint (written before fingerprints
  were recorded) cannot be checked and is refused the same way;
- `restart`: a non-empty folder is first renamed to `<dir>.replaced-<time>` (nothing deleted),
  and the run starts in a new, empty one.

A key only one side has (a field added by a later swefleet) is not compared.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from swefleet.content_hash import short
from swefleet.rundir import read_jsonl, write_json_atomic

log = logging.getLogger(__name__)

FINGERPRINT = "fingerprint.json"
RESTART_HINT = "--restart to start over"


class RunMismatch(ValueError):
    """The folder holds results of another run (one line: what differs)."""


def config_settings(config: BaseModel, sections: Iterable[str], exclude: Iterable[str]) -> dict:
    """The fields of `config` under `sections` (dotted: `agent`, `inference.vllm`), flattened
    to dotted keys down to the values that are no config section (a list or a table is one
    value), less those under an `exclude` key."""
    drop = tuple(exclude)
    flat: dict = {}
    for section in sections:
        value = config
        for part in section.split("."):
            value = getattr(value, part)
        if isinstance(value, BaseModel):
            _flatten(value, section, flat)
        else:
            flat[section] = to_jsonable_python(value)
    return {k: v for k, v in flat.items()
            if not any(k == d or k.startswith(d + ".") for d in drop)}


def _flatten(model: BaseModel, key: str, out: dict) -> None:
    for name in type(model).model_fields:
        value = getattr(model, name)
        if isinstance(value, BaseModel):
            _flatten(value, f"{key}.{name}", out)
        else:
            out[f"{key}.{name}"] = to_jsonable_python(value)


def holds_results(root: Path, patterns: Iterable[str]) -> bool:
    """Whether `root` holds anything a run produced: a non-empty file or a directory matching
    one of the glob `patterns` (a JSONL file counts when it has a record)."""
    for pattern in patterns:
        for path in root.glob(pattern):
            if path.is_dir() or (path.suffix == ".jsonl" and read_jsonl(path)):
                return True
            if path.suffix != ".jsonl" and path.is_file() and path.stat().st_size:
                return True
    return False


def claim_run_dir(root: Path, fingerprint: dict, *, has_results: bool, restart: bool = False,
                  about: dict | None = None) -> Path | None:
    """Make `root` the folder of the run `fingerprint` defines (see the module docstring);
    returns where `restart` moved an old run, else None."""
    moved = set_aside(root) if restart else None
    recorded = read_fingerprint(root) if moved is None else None
    if moved is None and has_results:
        if recorded is None:
            raise RunMismatch(f"{root} holds a run without a fingerprint (started by an older "
                              f"swefleet): it cannot be checked ({RESTART_HINT})")
        mismatch = describe_mismatch(root, recorded, {"fingerprint": fingerprint,
                                                      "about": about or {}})
        if mismatch:
            raise RunMismatch(mismatch)
        return None
    root.mkdir(parents=True, exist_ok=True)
    write_json_atomic(root / FINGERPRINT, {"fingerprint": fingerprint, "about": about or {},
                                           "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
    return moved


def read_fingerprint(root: Path) -> dict | None:
    """`root`'s `fingerprint.json` (None: none, or unreadable)."""
    try:
        return json.loads((root / FINGERPRINT).read_text())
    except (FileNotFoundError, ValueError):
        return None


def differences(recorded: dict, current: dict) -> list[str]:
    """The keys both fingerprints have whose values differ, in `current`'s order."""
    return [k for k, v in current.items() if k in recorded and recorded[k] != v]


def describe_mismatch(root: Path, recorded: dict, current: dict) -> str:
    """One line naming the first difference (and how many more), or "" when they agree."""
    keys = differences(recorded.get("fingerprint", {}), current["fingerprint"])
    if not keys:
        return ""
    key = keys[0]
    old = _shown(recorded["fingerprint"][key], recorded.get("about", {}).get(key))
    new = _shown(current["fingerprint"][key], current.get("about", {}).get(key))
    more = f"; {len(keys) - 1} more differ: {', '.join(keys[1:4])}" if len(keys) > 1 else ""
    if len(keys) > 4:
        more += ", ..."
    return f"{root} holds a run of {key} {old}; this one is {new}{more} ({RESTART_HINT})"


def _shown(value, about: str | None) -> str:
    if isinstance(value, str) and value.startswith("sha256:"):
        text = f"sha256 {short(value)}"
        return f"{about} ({text})" if about else text
    text = f"'{value}'" if isinstance(value, str) else json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def set_aside(root: Path) -> Path | None:
    """Rename a non-empty `root` to `<root>.replaced-<time>` beside it (nothing is deleted);
    returns the new path, None when there was nothing to move."""
    if not root.is_dir() or not any(root.iterdir()):
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = root.with_name(f"{root.name}.replaced-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = root.with_name(f"{root.name}.replaced-{stamp}-{n}")
    os.rename(root, target)
    log.warning("--restart: the previous run in %s was moved to %s", root, target)
    return target
