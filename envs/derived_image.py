"""Run any task image: a thin, cached layer that makes a third-party image fit for swefleet.

swefleet runs agent commands and grading steps as an unprivileged `agent` (uid 1000) that owns
the repository at the task's workdir. SWE-bench's instance images and most users' images have
no such user (and a root-owned `/testbed`), so `FarmConfig.image_user` says what to do:

- `derive` (default): build, locally from the task image (no pull, network off), a derived
  image that adds `agent` (uid 1000; it shares the uid with a user that already has it), gives
  it the workdir (`chown -R`, only when something there is not its own) and sets git's
  `safe.directory`. The image's ENV (PATH of a conda env, ...), WORKDIR and USER stay as
  they were (sandboxes and grading containers never run an image's ENTRYPOINT). Tagged `swefleet-derived:<hash of source image id + recipe + workdir>`
  and labelled `swefleet.kind=derived` (`envs.images.prune_images` removes unused ones), so a
  second run builds nothing. Images swefleet built itself (label `swefleet.kind=task`/`repo`:
  their workdir already belongs to `agent`) run as they are.
- `image`: run as the image's own user (its `USER`, root when unset): no layer, nothing
  changed. As root the agent may end its own container (an `infra_error`).
- `agent`: the image has a uid-1000 `agent` owning the workdir; run it as it is (the
  behaviour before this option existed).

`prepare` answers (image to run, user, how); the layer is built once per engine.
"""

from __future__ import annotations

import hashlib
import io
import logging
import shlex
import tarfile
import threading
from typing import Any, Literal, NamedTuple

from swefleet.envs.protocol import InfraError

log = logging.getLogger(__name__)

ImageUser = Literal["derive", "image", "agent"]
LABEL_KIND = "swefleet.kind"
LABEL_SOURCE = "swefleet.derived_from"
DERIVED_REPO = "swefleet-derived"
AGENT_UID = 1000
#: `swefleet.kind` of the images swefleet builds with the workdir owned by `agent` (a replay
#: snapshot is a committed sandbox of one of them, or of a derived layer).
SWEFLEET_BUILT = ("task", "repo", "derived", "replay-snapshot")

#: Run as root in the build: add `agent` (uid 1000), give it the workdir, trust every repo.
_RECIPE = r"""set -e
if ! id -u agent >/dev/null 2>&1; then
  sh=/bin/sh; [ -x /bin/bash ] && sh=/bin/bash
  if command -v useradd >/dev/null 2>&1; then useradd -o -u 1000 -m -s $sh agent
  else adduser -D -u 1000 -s $sh agent; fi
fi
if [ "$(id -u agent)" != 1000 ]; then
  echo "the image's user agent has uid $(id -u agent), not 1000: use image_user = \"image\"" >&2
  exit 1
fi
[ -d {workdir} ] || { echo "the image has no {workdir} (the task's workdir)" >&2; exit 1; }
if [ -n "$(find {workdir} ! -user 1000 -print -quit)" ]; then
  chown -R 1000:"$(id -g agent)" {workdir}
fi
command -v git >/dev/null 2>&1 || { echo "the image has no git" >&2; exit 1; }
git config --system --add safe.directory '*'
"""
RECIPE_VERSION = hashlib.sha256(_RECIPE.encode()).hexdigest()[:12]


class Prepared(NamedTuple):
    """How to run a task image: `image` to start, `user` for commands, `how` it was decided
    (`agent`: the image's own agent user, `derived`: swefleet's layer, `image`: the image's
    own user), recorded as `image_user` in trajectories."""

    image: str
    user: str
    how: str


class DeriveError(InfraError):
    """The derived layer could not be built (the message has the build's last lines)."""


_locks: dict[str, threading.Lock] = {}
_guard = threading.Lock()


def prepare(client: Any, image: str, workdir: str, mode: ImageUser,
            agent_user: str = "agent") -> Prepared:
    """How to run `image` on the engine of `client` under `mode` (module docstring). Blocking:
    one inspection, and the first time on this engine the build of the derived layer (one
    at a time per layer); `agent_user`: the user of the `agent`/`derive` modes
    (`SandboxLimits.user`). Docker errors propagate (`ImageNotFound`: not there)."""
    if mode == "agent":
        return Prepared(image, agent_user, "agent")
    attrs = client.api.inspect_image(image)
    config = attrs.get("Config") or {}
    if mode == "image":
        return Prepared(image, config.get("User") or "root", "image")
    if (config.get("Labels") or {}).get(LABEL_KIND) in SWEFLEET_BUILT:
        return Prepared(image, agent_user, "agent")  # built by swefleet: agent owns the workdir
    tag = derived_tag(attrs["Id"], workdir)
    if not _has_image(client, tag):
        with _guard:
            lock = _locks.setdefault(tag, threading.Lock())
        with lock:  # concurrent episodes of one image: one build, the others wait for it
            if not _has_image(client, tag):
                _build(client, attrs["Id"], image, config.get("User") or "", workdir, tag)
    _note_use(tag)
    return Prepared(tag, agent_user, "derived")


_used: set[str] = set()


def _note_use(tag: str) -> None:
    """Record the layer's use once per process (`swefleet images prune` keeps used ones)."""
    from swefleet.envs.images import _touch_usage

    with _guard:
        if tag not in _used:
            _touch_usage(tag)
            _used.add(tag)


def derived_tag(source_id: str, workdir: str) -> str:
    """Content-addressed tag of the derived image of `source_id` (same source, recipe and
    workdir: same tag, on every engine)."""
    h = hashlib.sha256(f"{source_id}\0{RECIPE_VERSION}\0{workdir}".encode()).hexdigest()[:16]
    return f"{DERIVED_REPO}:{h}"


def _has_image(client: Any, tag: str) -> bool:
    import docker.errors

    try:
        client.images.get(tag)
        return True
    except docker.errors.ImageNotFound:
        return False


def _build(client: Any, source_id: str, image: str, user: str, workdir: str, tag: str) -> None:
    """Build `tag` from the image `source_id` (by id: the image inspected, even if its tag
    `image` moved since)."""
    import docker.errors

    script = _RECIPE.replace("{workdir}", shlex.quote(workdir))
    restore = f"USER {user}\n" if user else ""
    dockerfile = (f"FROM {source_id}\nUSER root\nCOPY derive.sh /tmp/swefleet-derive.sh\n"
                  "RUN sh /tmp/swefleet-derive.sh && rm -f /tmp/swefleet-derive.sh\n" + restore)
    context = _context({"Dockerfile": dockerfile, "derive.sh": script})
    log.info("deriving %s from %s (adds user agent, owns %s)", tag, image, workdir)
    try:
        client.images.build(
            fileobj=context, custom_context=True, tag=tag, rm=True, forcerm=True, pull=False,
            network_mode="none",
            labels={LABEL_KIND: "derived", LABEL_SOURCE: source_id,
                    "swefleet.recipe": RECIPE_VERSION},
        )
    except docker.errors.BuildError as e:
        tail = "".join(str(c.get("stream") or c.get("error") or "") for c in e.build_log or ()
                       if isinstance(c, dict)).strip().splitlines()[-3:]
        raise DeriveError(f"cannot derive a runnable image from {image}: "
                          f"{' | '.join(tail) or e}") from e
    log.info("derived %s from %s", tag, image)


def _context(files: dict[str, str]) -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf
