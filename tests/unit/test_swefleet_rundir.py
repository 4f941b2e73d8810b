"""Run-directory JSONL files after a crash: a torn last line never costs a later record."""

import json

import pytest

from swefleet.rundir import append_jsonl, read_jsonl

pytestmark = pytest.mark.unit


def test_append_after_a_torn_line_keeps_the_new_record(tmp_path):
    path = tmp_path / "episodes.jsonl"
    append_jsonl(path, {"episode_id": "a"})
    with open(path, "ab") as f:  # the writer was killed mid-line
        f.write(b'{"episode_id": "torn", "reason": "x')
    append_jsonl(path, {"episode_id": "b"})  # the resumed run appends
    assert [r["episode_id"] for r in read_jsonl(path)] == ["a", "b"]


def test_a_utf8_character_cut_by_a_crash_is_skipped_not_fatal(tmp_path):
    path = tmp_path / "episodes.jsonl"
    append_jsonl(path, {"reason": "héllo"})
    line = json.dumps({"reason": "é"}, ensure_ascii=False).encode()
    with open(path, "ab") as f:
        f.write(line[: line.index(b"\xc3") + 1])  # first byte of a 2-byte character
    assert read_jsonl(path) == [{"reason": "héllo"}]
    append_jsonl(path, {"reason": "ok"})
    assert read_jsonl(path) == [{"reason": "héllo"}, {"reason": "ok"}]


def _entries(directory):
    return sorted(p.name for p in directory.iterdir())


def test_write_json_atomic_replaces_the_content_and_leaves_no_temp_file(tmp_path):
    from swefleet.rundir import write_json_atomic

    path = tmp_path / "summary.json"
    write_json_atomic(path, {"a": 1})
    write_json_atomic(path, {"a": 2, "b": "é"})
    assert json.loads(path.read_text()) == {"a": 2, "b": "é"}
    assert _entries(tmp_path) == ["summary.json"]


@pytest.mark.parametrize("failing", ["fsync", "replace"])
def test_a_failed_atomic_write_raises_and_keeps_the_old_file(tmp_path, monkeypatch, failing):
    """fsync is where a full or failing disk reports a write it had accepted: that error must
    reach the caller, the old file must stay whole, and the temp file must not be left over."""
    import errno
    import os

    from swefleet.rundir import write_json_atomic

    path = tmp_path / "config.json"
    write_json_atomic(path, {"version": "old"})

    def broken(*args, **kwargs):
        raise OSError(errno.EIO, f"{failing}: input/output error")

    monkeypatch.setattr(os, failing, broken)
    with pytest.raises(OSError, match="input/output error"):
        write_json_atomic(path, {"version": "new"})
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"version": "old"}
    assert _entries(tmp_path) == ["config.json"]
