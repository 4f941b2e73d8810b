"""envs.diskwatch.DiskWatchdog with a fake Docker client: who is measured, who is removed."""

from __future__ import annotations

import asyncio

import pytest
from swefleet.envs.config import SandboxLimits
from swefleet.envs.diskwatch import MIB, DiskWatchdog

pytestmark = pytest.mark.unit


class _Api:
    def __init__(self, sizes: dict[str, int]) -> None:
        self.sizes, self.calls = sizes, []

    def containers(self, size=False, filters=None):
        self.calls.append((size, filters))
        return [{"Id": cid, **({"SizeRw": n} if n else {})} for cid, n in self.sizes.items()]


class _Client:
    def __init__(self, sizes: dict[str, int]) -> None:
        self.api = _Api(sizes)


class _Sandbox:
    def __init__(self, cid: str, budget_mb: int | None, fail: bool = False) -> None:
        self.container_id, self.fail, self.killed = cid, fail, ""
        self.limits = SandboxLimits(disk_budget_mb=budget_mb)

    async def kill_over_budget(self, reason: str) -> None:
        self.killed = reason
        if self.fail:
            raise RuntimeError("daemon hiccup")


def _run(coro):
    return asyncio.run(coro)


def test_only_sandboxes_over_their_budget_are_removed():
    client = _Client({"a": 65 * MIB, "b": 64 * MIB, "c": 0, "warm": 900 * MIB})
    dog = DiskWatchdog(lambda: client, "run-1")
    a, b, c = _Sandbox("a", 64), _Sandbox("b", 64), _Sandbox("c", 64)
    for sb in (a, b, c):
        dog.watch(sb)
    assert _run(dog.check()) == [a]
    assert "65 MiB" in a.killed and "64 MiB" in a.killed and not b.killed and not c.killed
    assert len(dog) == 2 and dog.checks == 1  # `a` is no longer measured
    assert client.api.calls == [(True, {"label": "swefleet.run=run-1"})]


def test_no_budget_no_watch_and_no_call_when_idle():
    client = _Client({"a": 10**12})
    dog = DiskWatchdog(lambda: client, "run-1")
    dog.watch(_Sandbox("a", None))
    assert len(dog) == 0 and _run(dog.check()) == [] and client.api.calls == []
    sb = _Sandbox("a", 16)
    dog.watch(sb)
    dog.unwatch(sb)
    assert _run(dog.check()) == [] and client.api.calls == []


def test_a_failed_removal_is_logged_and_others_still_go(caplog):
    client = _Client({"a": 100 * MIB, "b": 100 * MIB})
    dog = DiskWatchdog(lambda: client, "run-1")
    a, b = _Sandbox("a", 16, fail=True), _Sandbox("b", 16)
    dog.watch(a)
    dog.watch(b)
    assert _run(dog.check()) == [a, b]
    assert a.killed and b.killed and "daemon hiccup" in caplog.text
