"""The repository's text as committed, for the grader's guard on behaviour probes.

A patch can read every file of the repository at run time, so the grader drops a probe's twins
that the repository's text crosses off (`behaviour.unfavoured`), as the recorder does. The text
is read in the grading sandbox before the model patch is applied (then the working tree is the
image's, as committed), with the recorder's own command (`behaviour.repository_text_command`),
and kept per image (the container's image id where the engine gives one, else the image's name:
a task image's name hashes its inputs) and working directory.
"""

from __future__ import annotations

import secrets
import threading
from collections import OrderedDict

from swefleet.envs.behaviour import repository_text_command
from swefleet.envs.protocol import InfraError

#: Repository texts kept (the least recently used goes first); each is at most 32 MiB, most
#: under 2 MiB.
KEPT = 16
_kept: OrderedDict[tuple[str, str], str] = OrderedDict()
_lock = threading.Lock()


def repository_text(container, image: str, workdir: str, attempts: int = 3) -> str:
    """The text of the repository's files in `container` (started from `image`, the model patch
    not yet applied), from the cache when `image` was read before. A read that comes back
    without its end marker (a fresh random token) or with a non-zero exit is tried again, then
    raises `InfraError`: a guard that read nothing would keep the twins the text crosses off."""
    key = ((getattr(container, "attrs", None) or {}).get("Image") or image, workdir)
    with _lock:
        if key in _kept:
            _kept.move_to_end(key)
            return _kept[key]
    for _ in range(attempts):
        token = secrets.token_hex(12)
        script = f"{repository_text_command()}; printf '\\n{token}\\n'"
        res = container.exec_run(["bash", "-c", script], workdir=workdir)
        out = res.output or b""
        end = f"\n{token}\n".encode()
        if res.exit_code == 0 and out.endswith(end):
            text = out[:-len(end)].decode("utf-8", errors="replace")
            with _lock:
                _kept[key] = text
                while len(_kept) > KEPT:
                    _kept.popitem(last=False)
            return text
    raise InfraError(f"reading the repository's text in {workdir} for the probes' guard came "
                     f"back short {attempts} times")
