"""Removing what crashed or finished runs left behind, found by label (never by name).

Blocking functions over one engine's client (the farm runs them in a thread, per host);
`remove_run_containers` is safe to call from a signal handler or `atexit`: it makes its own
clients (every host the run used) and does not touch asyncio.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from typing import Any

from swefleet.envs import containers as c
from swefleet.envs.hosts import Host, recorded_hosts

log = logging.getLogger(__name__)


def owner_alive(labels: dict[str, str]) -> bool | None:
    """Whether the process that created a container still lives; None if it is on another host
    or the labels do not say."""
    if labels.get(c.LABEL_OWNER_HOST) != socket.gethostname():
        return None
    try:
        pid = int(labels.get(c.LABEL_OWNER_PID, ""))
    except ValueError:
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # exists, owned by someone else
    started = labels.get(c.LABEL_OWNER_START, "")
    return not started or c.process_start_time(pid) == started  # a reused pid is not the owner


def _remove_all(client: Any, ids: list[str]) -> list[str]:
    removed = []
    for cid in ids:
        try:
            if c.remove_container(client, cid):
                removed.append(cid)
        except Exception as e:  # noqa: BLE001 - keep reaping the others; reported below
            log.warning("reaper could not remove %s: %s: %s", cid[:12], type(e).__name__, e)
    return removed


def reap_dead_runs(client: Any, keep_run: str | None = None) -> list[str]:
    """Remove containers whose owner process (on this host) is dead. Returns removed ids."""
    doomed = []
    for rec in c.list_sandboxes(client):
        labels = rec.get("Labels") or {}
        if labels.get(c.LABEL_RUN) != keep_run and owner_alive(labels) is False:
            doomed.append(rec["Id"])
    removed = _remove_all(client, doomed)
    if removed:
        log.info("reaper: removed %d container(s) of dead runs", len(removed))
    return removed


def reap_expired(client: Any, grace_s: float = 60.0, now: float | None = None) -> list[str]:
    """Remove containers of any run past their `expires_at` label (+ grace), and sandboxes
    that already exited."""
    now = time.time() if now is None else now
    doomed = []
    for rec in c.list_sandboxes(client):
        labels = rec.get("Labels") or {}
        try:
            expires = float(labels.get(c.LABEL_EXPIRES, "inf"))
        except ValueError:
            expires = float("inf")
        exited = rec.get("State") in ("exited", "dead") and labels.get(c.LABEL_KIND) == "sandbox"
        if expires + grace_s < now or exited:
            doomed.append(rec["Id"])
    removed = _remove_all(client, doomed)
    if removed:
        log.info("reaper: removed %d expired container(s)", len(removed))
    return removed


def remove_run_containers(run_id: str, client: Any | None = None) -> int:
    """Remove every container of `run_id` (sync) through `client`; without one, on every
    Docker host the run recorded (`envs.hosts.record_run`), else on the local engine. A host
    that cannot be reached is logged and skipped. Returns how many were removed."""
    if client is not None:
        return _remove_until_none_listed(client, run_id)
    hosts = recorded_hosts(run_id)
    if not hosts:
        return remove_run_containers(run_id, c.docker_client(timeout_s=30))
    removed = 0
    for host in hosts:
        one = Host(host, timeout_s=30)
        try:
            removed += remove_run_containers(run_id, one.client())
        except Exception as e:  # noqa: BLE001 - clean the other hosts; this one is reported
            log.warning("could not clean %s on %s: %s: %s", run_id, one.name, type(e).__name__, e)
        finally:
            one.close()
    return removed


def _existing(client: Any, ids: list[str]) -> list[str]:
    """The listed ids the engine can still find. An engine restarted after a crash can list a
    container that it already removed (its listing and its store disagree, until its next
    restart): `inspect` and `rm` answer "No such container"; nothing of it is left to remove."""
    import docker.errors

    found = []
    for cid in ids:
        try:
            client.api.inspect_container(cid)
        except docker.errors.NotFound:
            log.info("%s is listed but the engine has no such container (a stale listing)",
                     cid[:12])
            continue
        found.append(cid)
    return found


def _listed(client: Any, run_id: str | None) -> list[str]:
    return _existing(client, [rec["Id"] for rec in c.list_sandboxes(client, run_id)])


def _remove_until_none_listed(client: Any, run_id: str, timeout_s: float = 60.0) -> int:
    """Remove the run's containers, then list again until none is left: an engine restarted
    after a crash can still hold a container mid-removal, or one whose process outlived the
    old daemon and exits (auto-removed) later. Logs what is still there after `timeout_s`."""
    removed = 0
    deadline = time.monotonic() + timeout_s
    ids = _listed(client, run_id)
    while ids:
        removed += len(_remove_all(client, ids))
        ids = _listed(client, run_id)
        if ids and time.monotonic() > deadline:
            log.warning("%d container(s) of %s still listed after %.0fs: %s", len(ids), run_id,
                        timeout_s, ", ".join(i[:12] for i in ids))
            break
        if ids:
            time.sleep(0.2)
    return removed


def is_dead(labels: dict[str, str], state: str = "", now: float | None = None,
            grace_s: float = 60.0) -> bool:
    """A container `swefleet clean` may remove without `--all`: its owner process (on this
    host) is gone, or its lifetime is over (+ `grace_s`), or it is a sandbox that exited. A
    container whose owner lives, or runs on another host (cannot be checked), is not dead."""
    if owner_alive(labels) is False:
        return True
    try:
        expires = float(labels.get(c.LABEL_EXPIRES, "inf"))
    except ValueError:
        expires = float("inf")
    now = time.time() if now is None else now
    exited = state in ("exited", "dead") and labels.get(c.LABEL_KIND) == "sandbox"
    return expires + grace_s < now or exited


def clean(client: Any, run_id: str | None = None, everything: bool = False) -> tuple[int, int]:
    """`swefleet clean` on one engine: remove the swefleet containers (of `run_id`, or of every
    run) whose run is dead (`is_dead`), or all of them with `everything` (other users' live
    runs too). Returns (removed, kept alive)."""
    recs = c.list_sandboxes(client, run_id)
    doomed = [r["Id"] for r in recs
              if everything or is_dead(r.get("Labels") or {}, r.get("State", ""))]
    return len(_remove_all(client, doomed)), len(recs) - len(doomed)


def clean_everywhere(run_id: str | None = None, everything: bool = False) -> tuple[int, int]:
    """`clean` on every Docker host `run_id` recorded (`envs.hosts.record_run`), else on the
    local engine. A host that cannot be reached is logged and skipped."""
    hosts = recorded_hosts(run_id) if run_id else []
    if not hosts:
        return clean(c.docker_client(timeout_s=30), run_id, everything)
    removed = kept = 0
    for host in hosts:
        one = Host(host, timeout_s=30)
        try:
            r, k = clean(one.client(), run_id, everything)
            removed, kept = removed + r, kept + k
        except Exception as e:  # noqa: BLE001 - clean the other hosts; this one is reported
            log.warning("could not clean %s on %s: %s: %s", run_id, one.name, type(e).__name__, e)
        finally:
            one.close()
    return removed, kept


def leftover_containers(client: Any, run_id: str | None = None) -> list[str]:
    """Ids of swefleet containers (of `run_id`, or all) that still exist (listed, and found by
    the engine: `_existing`)."""
    return _listed(client, run_id)
