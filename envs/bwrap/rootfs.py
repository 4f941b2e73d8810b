"""Root filesystems for bwrap sandboxes: a Docker image exported once into a cache directory.

    root = ensure_rootfs("swefleet-task:abc", cache_dir)   # <cache>/<image id>/{rootfs,env.json}

The cache is content-addressed by the image id; `<cache>/by-name/<name>` links to it, so a node
without a Docker engine uses a cache filled on another machine (shared filesystem, or a bundle:
`envs/bwrap/bundle.py`); without Docker only the links are consulted. Exports are
atomic (a temporary directory renamed into place), safe when several processes race.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
import uuid
from pathlib import Path

from swefleet.envs.protocol import InfraError


def default_dir(kind: str) -> Path:
    return Path(tempfile.gettempdir()) / "swefleet-bwrap" / kind


def _name_link(cache: Path, image: str) -> Path:
    return cache / "by-name" / re.sub(r"[^A-Za-z0-9_.-]", "_", image)


def ensure_rootfs(image: str, cache_dir: str = "") -> Path:
    """The cache entry of `image` (a directory with `rootfs/` and `env.json`); exported with
    Docker when missing. `InfraError` when neither the cache nor Docker has it."""
    cache = Path(cache_dir) if cache_dir else default_dir("rootfs")
    _mkdirs(cache / "by-name")
    link = _name_link(cache, image)
    image_id = _image_id(image)
    if image_id is None:
        if (link / "env.json").is_file():
            return link.resolve()
        raise InfraError(f"image {image}: not in the rootfs cache {cache} and no Docker engine "
                         "(import a bundle holding it: python -m swefleet.envs.bwrap.bundle import)")
    entry = cache / image_id.replace(":", "_")
    if not (entry / "env.json").is_file():
        _export(image, entry)
    tmp_link = link.with_name(f".{link.name}.{uuid.uuid4().hex[:8]}")
    tmp_link.symlink_to(f"../{entry.name}")
    tmp_link.replace(link)
    return entry


def _image_id(image: str) -> str | None:
    if shutil.which("docker") is None:
        return None
    res = subprocess.run(["docker", "image", "inspect", "-f", "{{.Id}}", image],
                         capture_output=True, text=True, check=False)
    return res.stdout.strip() or None if res.returncode == 0 else None


def _export(image: str, entry: Path) -> None:
    tmp = entry.with_name(f".{entry.name}.{uuid.uuid4().hex[:8]}")
    (tmp / "rootfs").mkdir(parents=True)
    try:
        cfg = json.loads(_check(["docker", "image", "inspect", image]))[0]["Config"]
        cid = _check(["docker", "create", *_export_labels(), image]).strip()
        try:
            export = subprocess.Popen(["docker", "export", cid], stdout=subprocess.PIPE)
            untar = subprocess.run(["tar", "-x", "-C", str(tmp / "rootfs")],
                                   stdin=export.stdout, capture_output=True, check=False)
            export.wait()
            if export.returncode or untar.returncode:
                raise InfraError(f"export {image}: {untar.stderr.decode(errors='replace')[-500:]}")
        finally:
            subprocess.run(["docker", "rm", "-f", cid], capture_output=True, check=False)
        env = dict(e.split("=", 1) for e in cfg.get("Env") or [] if "=" in e)
        (tmp / "env.json").write_text(json.dumps({"env": env, "workdir": cfg.get("WorkingDir")}))
        os.chmod(tmp, 0o755)
        try:
            tmp.rename(entry)
        except OSError:  # another process exported it first
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _export_labels() -> list[str]:
    """`--label` options that let the reaper (`envs/reaper.py`) remove the stopped container an
    export makes when the exporting process dies mid-export (its `finally` never ran)."""
    from swefleet.envs.containers import LABEL_KIND, LABEL_RUN, owner_labels

    labels = {LABEL_RUN: "rootfs-export", LABEL_KIND: "export", **owner_labels()}
    return [f"--label={key}={value}" for key, value in labels.items()]


def _check(argv: list[str]) -> str:
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    if res.returncode:
        raise InfraError(f"{' '.join(argv[:3])}: {res.stderr.strip()[-500:]}")
    return res.stdout


def image_env(entry: Path) -> dict[str, str]:
    """The image's `ENV` (PATH etc.): `docker export` keeps files only."""
    return json.loads((entry / "env.json").read_text())["env"]


def _mkdirs(path: Path) -> None:
    path.mkdir(parents=True, exist_ok=True, mode=0o755)
    for p in [path, *path.parents]:
        if p == Path(tempfile.gettempdir()) or p == Path("/"):
            break
        if p.stat().st_uid == os.getuid():
            p.chmod(p.stat().st_mode | 0o755)


def writable_copy(entry: Path, src: str, dest: Path, uid: int) -> None:
    """`dest`: a copy of the rootfs path `src` (reflinks where the filesystem can), owned by
    `uid` (the host uid the sandbox runs as, mapped to its user inside)."""
    source = entry / "rootfs" / src.lstrip("/")
    dest.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        _check(["cp", "-a", "--reflink=auto", "--no-preserve=ownership", str(source), str(dest)])
    else:
        dest.mkdir(mode=0o755)
    if os.getuid() == 0 and uid != 0:
        _check(["chown", "-R", "-h", f"{uid}:{uid}", str(dest)])
