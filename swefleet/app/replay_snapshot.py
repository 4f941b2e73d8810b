"""Snapshots of a restored sandbox (`swefleet replay --via snapshot`), one per run, episode and
turn, kept in a per-run cache.

- Docker: `docker commit` of the container, tagged `swefleet-replay-snapshot:<key>` and labelled
  `swefleet.kind=replay-snapshot` and `swefleet.replay.run=<run folder>`; a restore starts the
  sandbox from that image instead of the task's.
- bwrap: a box's writable state is two directories (its copy of the workdir and of the home
  directory, `envs/bwrap/box.py`); they are copied (`cp -a`) to
  `RUN/replays/snapshots/<key>/{work,home}`, and a restore copies them into a fresh box.

A snapshot holds files only: the session shell's working directory, its variables and any
background process of the episode are not in it (a replay rebuilds them).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

REPOSITORY = "swefleet-replay-snapshot"
LABEL_KIND, KIND = "swefleet.kind", "replay-snapshot"
LABEL_RUN = "swefleet.replay.run"
BOX_DIRS = ("work", "home")
"""The writable directories of a bwrap box (`envs.bwrap.box.Box._prepare`)."""


def snapshot_key(run_root: Path, episode_id: str, turn: int) -> str:
    """A name for the snapshot of `episode_id` after `turn` in this run folder."""
    digest = hashlib.sha256(str(run_root.resolve()).encode()).hexdigest()[:10]
    safe = re.sub(r"[^a-z0-9_.-]", "-", episode_id.lower())[:90]
    return f"{digest}-{safe}-t{turn}"


def run_label(run_root: Path) -> str:
    return str(run_root.resolve())


# -- Docker ----------------------------------------------------------------------------------


def docker_tag(key: str) -> str:
    return f"{REPOSITORY}:{key}"


def docker_has(tag: str) -> bool:
    from swefleet.envs.images import image_exists

    return image_exists(tag)


def docker_commit(container_id: str, tag: str, run_root: Path, task_image: str) -> int:
    """Commit the container as `tag`; the bytes it adds to the task image."""
    from swefleet.envs.containers import docker_client

    client = docker_client()
    changes = [f"LABEL {LABEL_KIND}={KIND}", f'LABEL {LABEL_RUN}="{run_label(run_root)}"']
    repository, name = tag.split(":", 1)
    client.api.commit(container_id, repository=repository, tag=name, changes=changes,
                      pause=False)  # the sandbox is idle between commands
    return docker_added_bytes(tag, task_image)


def docker_added_bytes(tag: str, base_image: str) -> int:
    from swefleet.envs.containers import docker_client

    client = docker_client()
    size = client.images.get(tag).attrs["Size"]
    return size - client.images.get(base_image).attrs["Size"]


def docker_run_snapshots(run_root: Path | None) -> list[str]:
    """Tags of the snapshot images of this run folder (None: of every run)."""
    from swefleet.envs.containers import docker_client

    filters = [f"{LABEL_KIND}={KIND}"]
    if run_root is not None:
        filters.append(f"{LABEL_RUN}={run_label(run_root)}")
    images = docker_client().images.list(filters={"label": filters})
    return [t for image in images for t in image.tags if t.startswith(f"{REPOSITORY}:")]


def docker_remove(tag: str) -> None:
    from swefleet.envs.containers import docker_client

    docker_client().images.remove(tag, noprune=False)


# -- bwrap -----------------------------------------------------------------------------------


def bwrap_dir(run_root: Path, key: str) -> Path:
    return run_root / "replays" / "snapshots" / key


def bwrap_save(box: Any, dest: Path) -> int:
    """Copy the box's writable directories to `dest` (whole or not at all); its bytes."""
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for name in BOX_DIRS:
        _cp(Path(box.dir) / name, tmp / name)
    tmp.rename(dest)
    return dir_bytes(dest)


def bwrap_load(box: Any, src: Path) -> None:
    """Replace the contents of the box's writable directories by the snapshot's (the
    directories stay: they are bind-mounted into the box), owned by the box's uid as
    `envs.bwrap.rootfs.writable_copy` leaves them."""
    for name in BOX_DIRS:
        target = Path(box.dir) / name
        for child in target.iterdir():
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        subprocess.run(["cp", "-a", f"{src / name}/.", str(target)], check=True)
        if os.getuid() == 0 and box.uid != 0:  # each box runs as its own host uid
            subprocess.run(["chown", "-R", "-h", f"{box.uid}:{box.uid}", str(target)],
                           check=True)


def _cp(src: Path, dest: Path) -> None:
    subprocess.run(["cp", "-a", str(src), str(dest)], check=True)


def dir_bytes(path: Path) -> int:
    return sum(f.lstat().st_size for f in path.rglob("*") if not f.is_dir())


def bwrap_run_snapshots(run_root: Path) -> list[Path]:
    base = run_root / "replays" / "snapshots"
    return sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []
