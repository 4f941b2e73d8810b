"""A run folder's fingerprint: content hashes of checkpoints, and the check when a folder is
started again (resume the same run, refuse another with one line, `restart` moves it aside)."""

import json
import struct

import pytest

from swefleet import content_hash
from swefleet.content_hash import checkpoint_hash, file_hash
from swefleet.fingerprint import FINGERPRINT, RunMismatch, claim_run_dir, holds_results

pytestmark = pytest.mark.unit

ORACLE = {"command": "eval", "agent": "oracle", "k": 1, "envs.grading.timeout_s": 300.0}


def _checkpoint(directory, weights: bytes = b"\x01" * 4096):
    directory.mkdir(parents=True)
    (directory / "config.json").write_text('{"vocab_size": 10}')
    header = json.dumps({"w": {"dtype": "F32", "shape": [len(weights) // 4],
                               "data_offsets": [0, len(weights)]}}).encode()
    (directory / "model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header
                                                  + weights)
    return directory


def test_same_bytes_elsewhere_match_and_one_changed_byte_does_not(tmp_path):
    a = _checkpoint(tmp_path / "a")
    b = _checkpoint(tmp_path / "elsewhere/b")
    (b / ".durable").write_text("")  # markers and temp files are not the checkpoint
    assert checkpoint_hash(a) == checkpoint_hash(b)
    data = bytearray((b / "model.safetensors").read_bytes())
    data[-1] ^= 1
    (b / "model.safetensors").write_bytes(bytes(data))
    assert checkpoint_hash(a) != checkpoint_hash(b)
    assert file_hash(a / "config.json") == file_hash(b / "config.json")


def test_a_big_file_is_hashed_by_its_header_and_sampled_chunks(tmp_path, monkeypatch):
    """Over FULL_BYTES: the header and SAMPLES chunks; a byte between the chunks is not seen
    (the documented limit), a byte in a chunk or a changed shape in the header is."""
    monkeypatch.setattr(content_hash, "FULL_BYTES", 1024)
    monkeypatch.setattr(content_hash, "SAMPLES", 4)
    monkeypatch.setattr(content_hash, "CHUNK", 16)
    base = _checkpoint(tmp_path / "base", weights=bytes(range(256)) * 64)  # 16 KiB of weights
    size = (base / "model.safetensors").stat().st_size

    def variant(name, offset=None, header=None):
        d = _checkpoint(tmp_path / name, weights=bytes(range(256)) * 64)
        data = bytearray((d / "model.safetensors").read_bytes())
        if offset is not None:
            data[offset] ^= 0xFF
        if header is not None:
            data = data.replace(b'"shape": [4096]', header)
        (d / "model.safetensors").write_bytes(bytes(data))
        return checkpoint_hash(d)

    assert variant("between", offset=size // 6) == checkpoint_hash(base)
    assert variant("in-a-chunk", offset=size - 1) != checkpoint_hash(base)
    assert variant("shape", header=b'"shape": [2048]') != checkpoint_hash(base)


def test_a_new_folder_gets_the_fingerprint_and_the_same_run_resumes(tmp_path):
    out = tmp_path / "out"
    assert claim_run_dir(out, ORACLE, has_results=False) is None
    recorded = json.loads((out / FINGERPRINT).read_text())
    assert recorded["fingerprint"] == ORACLE
    (out / "episodes.jsonl").write_text('{"task_id": "t", "attempt": 0}\n')
    assert holds_results(out, ["episodes.jsonl"])
    assert claim_run_dir(out, dict(ORACLE), has_results=True) is None
    assert json.loads((out / FINGERPRINT).read_text()) == recorded  # untouched


def test_another_run_is_one_line_naming_what_differs_and_nothing_changes(tmp_path):
    out = tmp_path / "out"
    claim_run_dir(out, ORACLE, has_results=False)
    (out / "episodes.jsonl").write_text('{"task_id": "t", "attempt": 0}\n')
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    with pytest.raises(RunMismatch) as err:
        claim_run_dir(out, ORACLE | {"agent": "empty", "k": 2}, has_results=True)
    message = str(err.value)
    assert message == (f"{out} holds a run of agent 'oracle'; this one is 'empty'; 1 more "
                       "differ: k (--restart to start over)")
    assert "\n" not in message and isinstance(err.value, ValueError)  # CLI: one line, exit 2
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before


def test_a_model_difference_names_both_checkpoints(tmp_path):
    out = tmp_path / "out"
    v1 = {"command": "eval", "agent": "model", "model": "sha256:" + "1" * 64}
    claim_run_dir(out, v1, has_results=False, about={"model": "w/v000001"})
    (out / "episodes.jsonl").write_text('{"task_id": "t", "attempt": 0}\n')
    with pytest.raises(RunMismatch, match=r"holds a run of model w/v000001 \(sha256 111111111111"
                                          r"\); this one is w/v000002 \(sha256 222222222222\)"):
        claim_run_dir(out, v1 | {"model": "sha256:" + "2" * 64}, has_results=True,
                      about={"model": "w/v000002"})


def test_restart_moves_the_old_run_aside_whole(tmp_path):
    out = tmp_path / "out"
    claim_run_dir(out, ORACLE, has_results=False)
    (out / "episodes.jsonl").write_text('{"task_id": "t", "attempt": 0}\n')
    moved = claim_run_dir(out, ORACLE | {"agent": "empty"}, has_results=True, restart=True)
    assert moved is not None and moved.name.startswith("out.replaced-")
    assert (moved / "episodes.jsonl").read_text() == '{"task_id": "t", "attempt": 0}\n'
    assert json.loads((moved / FINGERPRINT).read_text())["fingerprint"]["agent"] == "oracle"
    assert sorted(p.name for p in out.iterdir()) == [FINGERPRINT]
    assert json.loads((out / FINGERPRINT).read_text())["fingerprint"]["agent"] == "empty"
    again = claim_run_dir(out, ORACLE, has_results=False, restart=True)  # a second one, same second
    assert again is not None and again != moved and moved.exists()


def test_a_start_without_results_is_not_held_to_its_fingerprint(tmp_path):
    """A start that failed before any result (a bad task file) does not bind the folder."""
    out = tmp_path / "out"
    claim_run_dir(out, ORACLE, has_results=False)
    (out / "episodes.jsonl").write_text("")  # created, never written
    assert not holds_results(out, ["episodes.jsonl"])
    claim_run_dir(out, ORACLE | {"agent": "empty"}, has_results=False)
    assert json.loads((out / FINGERPRINT).read_text())["fingerprint"]["agent"] == "empty"


def test_results_without_a_fingerprint_cannot_be_checked(tmp_path):
    out = tmp_path / "old"
    out.mkdir()
    (out / "episodes.jsonl").write_text('{"task_id": "t", "attempt": 0}\n')
    with pytest.raises(RunMismatch, match=r"without a fingerprint.*\(--restart to start over\)"):
        claim_run_dir(out, ORACLE, has_results=True)
    assert not (out / FINGERPRINT).exists()


def test_a_key_only_one_side_has_is_not_compared(tmp_path):
    out = tmp_path / "out"
    claim_run_dir(out, ORACLE, has_results=False)
    newer = ORACLE | {"agent.some_new_field": 3}  # a field a later swefleet added
    assert claim_run_dir(out, newer, has_results=True) is None
