"""Sandbox images without a registry.

The base image is bootstrapped offline from Debian packages (`debootstrap` into a folder, then
`docker import`), so swefleet works on air-gapped machines and machines that cannot pull. Task
images are layered on the base, tagged by a hash of their content, and reused.

With several Docker hosts (`FarmConfig.hosts`) an image is made once (on the local engine) and
copied to each host that lacks it (`transfer_image`, `envs.hosts.HostSet.ensure_image`).

Users who can pull images may instead build `docker/base.Dockerfile` (its base is a build
argument, e.g. `python:3.11-slim`) and pass the tag as `base_image`.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from swefleet.envs.containers import docker_client

from swefleet.rundir import write_text_atomic
from swefleet.types import Task

log = logging.getLogger(__name__)

DEFAULT_BASE_IMAGE = "swefleet-base:bookworm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
#: What every sandbox needs: a Python with pytest for the task suites, git and patch for diffs.
BASE_PACKAGES = ("python3", "python3-pytest", "git", "patch", "procps", "ca-certificates")
AGENT_UID = 1000
LABEL_KIND = "swefleet.kind"


def image_exists(tag: str) -> bool:
    import docker.errors

    try:
        docker_client().images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def has_image(client, tag: str) -> bool:
    """Whether the engine of `client` holds `tag`."""
    import docker.errors

    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def transfer_image(src, dst, tag: str, chunk_size: int = 1 << 20) -> None:
    """Copy `tag` from the engine of `src` to that of `dst`: `docker save` streamed into
    `docker load` through the SDK (no registry, no file; layers `dst` has are not stored
    twice). Docker errors propagate."""
    started = time.monotonic()
    dst.images.load(src.api.get_image(tag, chunk_size=chunk_size))
    if not has_image(dst, tag):
        raise RuntimeError(f"loading {tag} did not create it")
    log.info("transferred image %s in %.1fs", tag, time.monotonic() - started)


def build_base_image(
    tag: str = DEFAULT_BASE_IMAGE,
    *,
    suite: str = "bookworm",
    mirror: str = DEFAULT_MIRROR,
    packages: tuple[str, ...] = BASE_PACKAGES,
    force: bool = False,
) -> str:
    """Bootstrap a Debian root filesystem and import it as `tag`. Reused unless `force`."""
    if not force and image_exists(tag):
        log.info("base image %s exists; reusing", tag)
        return tag
    if shutil.which("debootstrap") is None:
        raise RuntimeError("debootstrap is not installed: `apt-get install debootstrap` (Debian)")
    with tempfile.TemporaryDirectory(prefix="swefleet-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        cmd = [
            "debootstrap", "--variant=minbase", f"--include={','.join(packages)}",
            suite, str(rootfs), mirror,
        ]
        log.info("bootstrapping %s: %s", tag, " ".join(cmd))
        subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
        _prepare_rootfs(rootfs)
        tar_path = Path(tmp) / "rootfs.tar"
        subprocess.run(["tar", "-C", str(rootfs), "-cf", str(tar_path), "."], check=True)
        _import_tar(tar_path, tag)
    return tag


def _prepare_rootfs(rootfs: Path) -> None:
    """Add the unprivileged agent user and drop caches that only make the image bigger."""
    subprocess.run(
        ["chroot", str(rootfs), "useradd", "-m", "-u", str(AGENT_UID), "-s", "/bin/bash", "agent"],
        check=True,
    )
    for sub in ("var/cache/apt/archives", "var/lib/apt/lists"):
        for p in (rootfs / sub).glob("*"):
            if p.is_file():
                p.unlink()
    (rootfs / "testbed").mkdir(exist_ok=True)


def _import_tar(tar_path: Path, tag: str) -> None:
    repo, _, version = tag.partition(":")
    changes = [
        'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
        "ENV LANG=C.UTF-8",
        'CMD ["/bin/bash"]',
        f"LABEL {LABEL_KIND}=base",
    ]
    client = docker_client()
    client.api.import_image_from_file(
        str(tar_path), repository=repo, tag=version or "latest", changes=changes
    )
    log.info("imported %s", tag)


def task_image_tag(task: Task, source_dir: Path, base_image: str, patch: bytes = b"") -> str:
    """Content-addressed tag: same base + same files (+ same patch) -> same image."""
    h = hashlib.sha256(base_image.encode())
    for path in sorted(p for p in source_dir.rglob("*") if p.is_file()):
        if _is_junk(path.relative_to(source_dir)):
            continue
        h.update(str(path.relative_to(source_dir)).encode())
        h.update(path.read_bytes())
    h.update(task.workdir.encode())
    if patch:
        h.update(b"\0source_patch\0" + patch)
    return f"swefleet-task:{_tag_slug(task.repo)}-{h.hexdigest()[:12]}"


def _tag_slug(repo: str) -> str:
    """`owner/name` as the start of a Docker tag (`[a-z0-9_][a-z0-9_.-]*`, at most 128 chars
    with the hash): `owner__name`, other characters as `-`."""
    slug = re.sub(r"[^a-z0-9_.-]+", "-", repo.replace("/", "__").lower())
    return slug.lstrip(".-")[:100] or "task"


def _is_junk(rel: Path) -> bool:
    """Caches that tools leave in a source tree: never part of a task's content."""
    return any(part == "__pycache__" or (part.startswith(".") and part.endswith("_cache"))
               for part in rel.parts)


def ensure_task_image(
    task: Task, source_dir: Path, base_image: str = DEFAULT_BASE_IMAGE, patch: bytes = b""
) -> str:
    """Build (or reuse) the image holding `source_dir` as a git repository at `task.workdir`;
    `patch` (a unified diff, e.g. the task's bug) is applied before the base commit."""
    tag = task_image_tag(task, source_dir, base_image, patch)
    _touch_usage(tag)
    if image_exists(tag):
        return tag
    context = _task_build_context(source_dir, base_image, task.workdir, patch)
    client = docker_client()
    client.images.build(  # forcerm: a failed step leaves no stopped container behind
        fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True,
        network_mode="none", labels={LABEL_KIND: "task"},
    )
    log.info("built task image %s", tag)
    return tag


def _task_build_context(
    source_dir: Path, base_image: str, workdir: str, patch: bytes = b""
) -> io.BytesIO:
    copy = "COPY source.patch /tmp/source.patch\n" if patch else ""
    apply = "git apply /tmp/source.patch && rm /tmp/source.patch && " if patch else ""
    dockerfile = f"""FROM {base_image}
COPY repo {workdir}
{copy}RUN cd {workdir} && git init -q && {apply}git config user.email swefleet@localhost \\
 && git config user.name swefleet && git add -A && git commit -qm base \\
 && git config --system --add safe.directory '*' && chown -R {AGENT_UID}:{AGENT_UID} {workdir}
WORKDIR {workdir}
"""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = dockerfile.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        if patch:
            info = tarfile.TarInfo("source.patch")
            info.size, info.mode = len(patch), 0o644
            tar.addfile(info, io.BytesIO(patch))
        tar.add(
            str(source_dir), arcname="repo",
            filter=lambda ti: None if _is_junk(Path(ti.name)) else ti,
        )
    buf.seek(0)
    return buf


def ensure_image_from_files(
    tag: str, dockerfile: str, files: dict[str, bytes], kind: str = "task"
) -> str:
    """Build (or reuse) `tag` from a Dockerfile and in-memory context files (path -> bytes),
    with the network off and label `swefleet.kind=<kind>`. Used by `envs.synth` for recipe
    images; `tag` must be content-addressed by the caller."""
    if kind == "task":
        _touch_usage(tag)
    if image_exists(tag):
        return tag
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in {"Dockerfile": dockerfile.encode(), **files}.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    docker_client().images.build(
        fileobj=buf, custom_context=True, tag=tag, rm=True, forcerm=True, network_mode="none",
        labels={LABEL_KIND: kind},
    )
    log.info("built %s image %s", kind, tag)
    return tag


def _usage_file() -> Path:
    root = Path(os.environ.get("SWEFLEET_CACHE", Path.home() / ".cache" / "swefleet"))
    root.mkdir(parents=True, exist_ok=True)
    return root / "image_usage.json"


def _touch_usage(tag: str) -> None:
    """Record when a task image was last used (Docker itself does not track it)."""
    path = _usage_file()
    try:
        usage = json.loads(path.read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        usage = {}
    usage[tag] = time.time()
    write_text_atomic(path, json.dumps(usage))


def prune_images(older_than_days: float = 7.0) -> list[str]:
    """Remove task images and derived layers (`envs.derived_image`) not used for
    `older_than_days` (the disk budget). Returns removed tags."""
    import docker.errors

    client = docker_client()
    try:
        usage = json.loads(_usage_file().read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        usage = {}
    cutoff = time.time() - older_than_days * 86400
    removed = []
    kinds = ("derived", "task")  # derived layers first (their sources cannot go before them)
    listed = [i for k in kinds for i in client.images.list(filters={"label": f"{LABEL_KIND}={k}"})]
    for image in listed:
        for tag in image.tags:
            if usage.get(tag, 0.0) >= cutoff:
                continue
            try:
                client.images.remove(tag)
                removed.append(tag)
            except docker.errors.APIError as e:  # in use by a container: keep it
                log.info("keeping %s: %s", tag, e.explanation)
    return removed
