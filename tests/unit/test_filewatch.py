"""swefleet.filewatch: a waiter wakes at the rename that puts its path in place, not at a timer."""

import asyncio
import os
import signal
import threading
import time

import pytest

from swefleet import filewatch
from swefleet.filewatch import FileWatch

pytestmark = pytest.mark.unit
SLOW = 60.0  # a backstop no test waits for: a wait that returns early was woken by an event


def _publish_later(path, delay_s: float, stamps: dict) -> threading.Thread:
    """Write `path` atomically (temp name, then rename) after `delay_s`; stamps the rename."""

    def write() -> None:
        time.sleep(delay_s)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".tmp-{path.name}")
        tmp.write_bytes(b"x" * 1000)
        stamps["renamed"] = time.monotonic()
        os.replace(tmp, path)

    t = threading.Thread(target=write)
    t.start()
    return t


def test_blocking_wait_wakes_at_the_rename(tmp_path):
    path, stamps = tmp_path / "step_000000.npz", {}
    with FileWatch(backstop_s=SLOW) as watch:
        writer = _publish_later(path, 0.2, stamps)
        assert watch.wait(path, timeout_s=SLOW)
        woke = time.monotonic()
        writer.join()
    assert watch.found_by == "event" and watch.wakes["backstop"] == 0
    assert woke - stamps["renamed"] < 0.5  # typically ~0.1 ms; bound loose for a loaded CI box


async def test_async_wait_wakes_at_the_rename_of_a_directory(tmp_path):
    """The trainer publishes weights as a directory renamed into place."""
    path = tmp_path / "weights" / "v000001"
    path.parent.mkdir()

    async def publish() -> None:
        await asyncio.sleep(0.2)
        tmp = path.with_name(".tmp-v000001")
        tmp.mkdir()
        (tmp / "model.safetensors").write_bytes(b"w")
        os.replace(tmp, path)

    with FileWatch(backstop_s=SLOW) as watch:
        writer = asyncio.create_task(publish())
        assert await asyncio.wait_for(watch.wait_async(path, timeout_s=SLOW), 10)
        await writer
    assert watch.found_by == "event" and watch.wakes["backstop"] == 0


def test_a_path_already_there_and_a_missing_directory(tmp_path):
    with FileWatch(backstop_s=SLOW) as watch:
        (tmp_path / "here").touch()
        assert watch.wait(tmp_path / "here") and watch.found_by == "present"
        path = tmp_path / "a" / "b" / "step_000001.npz"  # its directories appear later
        writer = _publish_later(path, 0.2, {})
        assert watch.wait(path, timeout_s=10)
        writer.join()
    assert watch.found_by == "event"


def test_timeout_returns_false(tmp_path):
    with FileWatch(backstop_s=SLOW) as watch:
        t0 = time.monotonic()
        assert not watch.wait(tmp_path / "never", timeout_s=0.3)
        assert 0.3 <= time.monotonic() - t0 < 5


async def test_async_timeout_returns_false_and_cancel_leaves_no_reader(tmp_path):
    with FileWatch(backstop_s=SLOW) as watch:
        assert not await watch.wait_async(tmp_path / "never", timeout_s=0.2)
        task = asyncio.create_task(watch.wait_async(tmp_path / "never"))
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        path = tmp_path / "later"
        writer = _publish_later(path, 0.1, {})
        assert await watch.wait_async(path, timeout_s=10)  # the fd can be a reader again
        await asyncio.to_thread(writer.join)


def test_stop_from_another_thread(tmp_path):
    stop = threading.Event()
    with FileWatch(backstop_s=SLOW) as watch:
        def stop_soon() -> None:
            time.sleep(0.2)
            stop.set()
            watch.wake()

        threading.Thread(target=stop_soon).start()
        t0 = time.monotonic()
        assert not watch.wait(tmp_path / "never", timeout_s=SLOW, stop=stop)
    assert time.monotonic() - t0 < 5 and watch.found_by is None


def test_a_signal_whose_handler_sets_stop_ends_the_wait(tmp_path):
    """SIGTERM to the trainer: its handler only sets the event; the wait must see it at once."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGUSR1, lambda *_: stop.set())
    try:
        threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1)).start()
        t0 = time.monotonic()
        with FileWatch(backstop_s=SLOW) as watch:
            assert not watch.wait(tmp_path / "never", timeout_s=SLOW, stop=stop)
        assert stop.is_set() and time.monotonic() - t0 < 5
        assert signal.set_wakeup_fd(-1) == -1  # the wait gave the wakeup fd back
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_without_inotify_the_backstop_finds_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(filewatch, "_open_inotify", lambda: None)
    path = tmp_path / "step_000000.npz"
    with FileWatch(backstop_s=0.05) as watch:
        writer = _publish_later(path, 0.1, {})
        assert watch.wait(path, timeout_s=10)
        writer.join()
    assert watch.found_by == "backstop"
