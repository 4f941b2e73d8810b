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
