"""`Journal`: appends JSON lines (episodes, drops, metrics) from one writer thread, in order.

The event loop hands records over and goes on; the thread serializes, appends and fsyncs them
in the order they were handed over (one fsync per file per wakeup: a group commit). The future
`append` returns is resolved only once its line is on disk, so a record whose future is done
survives a kill of the process (or of the machine, as far as fsync goes).

    journal = Journal()
    await journal.append_async(run_dir.episodes, traj)   # durable when this returns
    journal.append(run_dir.drops, {...})                 # fire and forget, still in order
    await journal.flush()                                # everything handed over is durable
    journal.close()
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import logging
import queue
import threading
import uuid
from pathlib import Path

from pydantic import BaseModel

from swefleet.rundir import write_lines
from swefleet.types import Trajectory

log = logging.getLogger(__name__)

_Item = tuple[Path, "dict | BaseModel", concurrent.futures.Future]
_STOP = object()
_BASE64_CHARS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="


def encode_line(record: dict | BaseModel) -> bytes:
    """One JSON line. A trajectory's routed experts (MBs of base64 per turn) are spliced in
    as they are (base64 needs no JSON escaping): serializing them in one call would hold the
    GIL, and so stall the event loop, for tens of milliseconds per MoE episode."""
    if isinstance(record, Trajectory) and any(t.routed_experts for t in record.turns):
        return b"".join(_trajectory_parts(record)) + b"\n"
    line = record.model_dump_json() if isinstance(record, BaseModel) else json.dumps(record)
    return (line + "\n").encode("utf-8")


def _base64_bytes(text: str) -> bytes | None:
    """`text` as bytes if it is base64 (needs no escaping inside a JSON string), else None."""
    if not text.isascii():
        return None
    data = text.encode("ascii")
    return None if data.translate(None, _BASE64_CHARS) else data


def _trajectory_parts(traj: Trajectory) -> list[bytes]:
    """The JSON of `traj` in pieces: the light part serialized with placeholders, and each
    routed-experts string as is (what `model_dump_json` gives, without one long GIL hold)."""
    big = {i: t.routed_experts for i, t in enumerate(traj.turns) if t.routed_experts}
    mark = f"\u0001re{uuid.uuid4().hex}:"
    light = traj.model_copy(update={"turns": [
        t.model_copy(update={"routed_experts": f"{mark}{i}"}) if i in big else t
        for i, t in enumerate(traj.turns)]})
    parts = light.model_dump_json().encode().split(b'"' + mark.encode().replace(b"\x01", b"\\u0001"))
    out = [parts[0]]
    for part in parts[1:]:
        index, rest = part.split(b'"', 1)
        data = _base64_bytes(big[int(index)])
        if data is None:  # not base64: serialized the usual way
            out.append(json.dumps(big[int(index)]).encode())
        else:
            out += [b'"', data, b'"']
        out.append(rest)
    return out


class Journal:
    """One daemon thread that appends records to JSONL files in submission order."""

    def __init__(self, sync: bool = True) -> None:
        self.sync = sync
        """fsync each file before its records are acknowledged (off only for benchmarks)."""
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._work, name="journal", daemon=True)
        self._closed = False
        self._thread.start()

    def append(self, path: Path, record: dict | BaseModel) -> concurrent.futures.Future:
        """Hand `record` over; the future resolves (None) once its line is durable, or with
        the write's error. The record must not be changed until then."""
        if self._closed:
            raise RuntimeError("the journal is closed")
        fut: concurrent.futures.Future = concurrent.futures.Future()
        self._queue.put((Path(path), record, fut))
        return fut

    async def append_async(self, path: Path, record: dict | BaseModel) -> None:
        """`append` and wait (without blocking the loop) until the line is durable."""
        await asyncio.wrap_future(self.append(path, record))

    @property
    def closed(self) -> bool:
        """True once `close` was called: `append` refuses from then on."""
        return self._closed

    async def flush(self) -> None:
        """Wait until everything handed over so far is durable (raises a write's error)."""
        marker: concurrent.futures.Future = concurrent.futures.Future()
        self._queue.put((None, None, marker))
        await asyncio.wrap_future(marker)

    def close(self, timeout_s: float = 60.0) -> None:
        """Write what is queued, then stop the thread (idempotent; blocks up to `timeout_s`)."""
        if not self._closed:
            self._closed = True
            self._queue.put(_STOP)
        self._thread.join(timeout_s)

    def _work(self) -> None:
        while True:
            items = [self._queue.get()]
            while True:  # take all that is waiting: one write and fsync per file for them
                try:
                    items.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            stop = any(it is _STOP for it in items)
            try:
                self._write([it for it in items if it is not _STOP])
            except BaseException as e:  # never leave a waiter hanging
                log.exception("journal: write failed")
                for item in items:
                    if item is not _STOP:
                        _settle(item[2], e)
            if stop:
                return

    def _write(self, items: list[_Item]) -> None:
        by_path: dict[Path, list[bytes]] = {}
        futures: dict[Path | None, list[concurrent.futures.Future]] = {}
        for path, record, fut in items:
            futures.setdefault(path, []).append(fut)
            if path is None:
                continue
            try:
                by_path.setdefault(path, []).append(encode_line(record))
            except Exception as e:  # noqa: BLE001 - the submitter gets the error
                futures[path].remove(fut)
                _settle(fut, e)
        errors: dict[Path, BaseException] = {}
        for path, lines in by_path.items():
            try:
                write_lines(path, b"".join(lines), self.sync)
            except Exception as e:  # noqa: BLE001 - handed to each record's future
                log.error("journal: could not write %s: %s: %s", path, type(e).__name__, e)
                errors[path] = e
        first_error = next(iter(errors.values()), None)
        for path, futs in futures.items():
            for fut in futs:
                _settle(fut, first_error if path is None else errors.get(path))


def _settle(fut: concurrent.futures.Future, error: BaseException | None) -> None:
    """Resolve `fut` unless its waiter gave up (cancelled it: the record is written anyway)."""
    if fut.cancelled():
        return
    try:
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(None)
    except concurrent.futures.InvalidStateError:  # cancelled meanwhile
        pass
