"""`swefleet.journal.Journal`: order kept, an acknowledgement means fsynced, and a killed writer
loses no acknowledged record."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading

import pytest

from swefleet import rundir as rundir_mod
from swefleet.journal import Journal
from swefleet.types import Trajectory

pytestmark = pytest.mark.integration


@pytest.mark.asyncio
async def test_records_keep_their_order_across_files(tmp_path):
    j = Journal()
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    futs = [j.append(a if i % 3 else b, {"i": i}) for i in range(2000)]
    futs.append(j.append(a, Trajectory(episode_id="e", task_id="t", group_id="g")))
    await j.flush()
    assert all(f.done() and f.exception() is None for f in futs)
    got_a = [json.loads(x) for x in a.read_text().splitlines()]
    got_b = [json.loads(x)["i"] for x in b.read_text().splitlines()]
    assert [r["i"] for r in got_a[:-1]] == [i for i in range(2000) if i % 3]
    assert got_a[-1]["episode_id"] == "e"
    assert got_b == [i for i in range(2000) if not i % 3]
    j.close()


@pytest.mark.asyncio
async def test_a_record_is_acknowledged_only_after_its_fsync(tmp_path, monkeypatch):
    gate, synced, real = threading.Event(), [], os.fsync

    def slow_fsync(fd):
        gate.wait(10)
        real(fd)
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))

    monkeypatch.setattr(rundir_mod.os, "fsync", slow_fsync)
    j = Journal()
    path = tmp_path / "episodes.jsonl"
    ack = asyncio.ensure_future(j.append_async(path, {"n": 1}))
    await asyncio.sleep(0.2)
    assert not ack.done() and not synced  # written maybe, but not yet durable: no ack
    gate.set()
    await asyncio.wait_for(ack, 10)
    assert synced == [str(path)]
    j.close()


@pytest.mark.asyncio
async def test_a_write_error_reaches_the_submitter(tmp_path):
    j = Journal()
    with pytest.raises(OSError):
        await j.append_async(tmp_path / "missing-dir" / "x.jsonl", {"n": 1})
    await j.append_async(tmp_path / "ok.jsonl", {"n": 2})  # the thread goes on
    j.close()


WRITER = r"""
import asyncio, sys
from swefleet.journal import Journal

async def main(path):
    j = Journal()
    big = "x" * 200_000  # MB-scale lines, as MoE trajectories are
    async def one(i):
        await j.append_async(path, {"i": i, "pad": big})
        print(i, flush=True)  # acknowledged: durable
    i = 0
    while True:
        await asyncio.gather(*(one(i + k) for k in range(16)))
        i += 16

asyncio.run(main(sys.argv[1]))
"""


def test_a_killed_writer_loses_no_acknowledged_record(tmp_path):
    path = tmp_path / "episodes.jsonl"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE,
                            text=True)
    acked = []
    try:
        for line in proc.stdout:
            acked.append(int(line))
            if len(acked) >= 300:
                break
    finally:
        proc.send_signal(signal.SIGKILL)  # mid-write: later records may be torn or missing
        proc.wait(10)
    acked += [int(x) for x in proc.stdout.read().split()]
    proc.stdout.close()
    assert len(acked) >= 300
    from swefleet.rundir import read_jsonl

    on_disk = {r["i"] for r in read_jsonl(path)}
    assert set(acked) <= on_disk


@pytest.mark.asyncio
async def test_a_waiter_that_gives_up_does_not_stop_the_writer(tmp_path, monkeypatch):
    gate, real = threading.Event(), os.fsync
    monkeypatch.setattr(rundir_mod.os, "fsync", lambda fd: (gate.wait(10), real(fd)))
    j = Journal()
    path = tmp_path / "episodes.jsonl"
    waiter = asyncio.ensure_future(j.append_async(path, {"n": 1}))
    await asyncio.sleep(0.1)
    waiter.cancel()  # e.g. the run is shutting down: the record is still written
    gate.set()
    await asyncio.wait_for(j.append_async(path, {"n": 2}), 10)
    assert [json.loads(x)["n"] for x in path.read_text().splitlines()] == [1, 2]
    j.close()
