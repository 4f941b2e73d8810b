"""The orchestrator -> trainer batch file: packing, validation, atomic write, round trip."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from swefleet import batch
from swefleet.batch import batch_path, pack_samples, read_batch, weights_path, write_batch

pytestmark = pytest.mark.unit


def _samples():
    return [
        {
            "tokens": [5, 6, 7],
            "loss_mask": [False, True, True],
            "inference_logprobs": [0.0, -0.5, -1.5],
            "advantage": 1.5,
            "policy_version": 3,
        },
        {
            "tokens": [8, 9],
            "loss_mask": [False, True],
            "inference_logprobs": [9.0, -0.25],
            "advantage": -0.5,
            "policy_version": 4,
        },
    ]


def test_pack_samples_exact_arrays():
    a = pack_samples(_samples())
    assert a["tokens"].tolist() == [5, 6, 7, 8, 9]
    assert a["positions"].tolist() == [0, 1, 2, 0, 1]
    assert a["cu_seqlens"].tolist() == [0, 3, 5]
    assert a["loss_mask"].tolist() == [False, True, True, False, True]
    # the logprob under mask=False is stored as 0, whatever the caller passed
    assert a["inference_logprobs"].tolist() == [0.0, -0.5, -1.5, 0.0, -0.25]
    assert a["advantages"].tolist() == [1.5, 1.5, 1.5, -0.5, -0.5]
    assert a["policy_version"].tolist() == [3, 4]
    expected = {k: np.dtype(v[0]) for k, v in batch.ARRAY_SPECS.items()}
    assert {k: v.dtype for k, v in a.items()} == expected


@pytest.mark.parametrize(
    "bad",
    [
        {"tokens": [], "loss_mask": [], "inference_logprobs": []},
        {"tokens": [1, 2], "loss_mask": [False], "inference_logprobs": [0.0, 0.0]},
        {"tokens": [1, 2], "loss_mask": [True, True], "inference_logprobs": [0.0, 0.0]},
    ],
)
def test_pack_samples_rejects_malformed_samples(bad):
    with pytest.raises(ValueError):
        pack_samples([{**bad, "advantage": 0.0, "policy_version": 0}])
    with pytest.raises(ValueError):
        pack_samples([])


def test_write_read_round_trip(tmp_path):
    arrays = pack_samples(_samples())
    path = write_batch(batch_path(tmp_path, 7), arrays, {"step": 7, "note": "x"})
    assert path.name == "step_000007.npz"
    got, meta = read_batch(path)
    assert meta == {"schema_version": batch.SCHEMA_VERSION, "step": 7, "note": "x"}
    assert got.keys() == arrays.keys()
    for k in arrays:
        assert got[k].dtype == arrays[k].dtype and np.array_equal(got[k], arrays[k]), k
    assert [p.name for p in tmp_path.iterdir()] == ["step_000007.npz"]  # no temp file left
    assert weights_path(tmp_path, 8).name == "v000008"


def test_failed_write_leaves_neither_temp_nor_target(tmp_path, monkeypatch):
    def boom(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(batch.np, "savez", boom)
    with pytest.raises(OSError):
        write_batch(tmp_path / "step_000000.npz", pack_samples(_samples()), {})
    assert list(tmp_path.iterdir()) == []


def test_overwrite_replaces_whole_file(tmp_path):
    path = tmp_path / "b.npz"
    write_batch(path, pack_samples(_samples()), {"v": 1})
    write_batch(path, pack_samples(_samples()[:1]), {"v": 2})
    arrays, meta = read_batch(path)
    assert meta["v"] == 2 and arrays["cu_seqlens"].tolist() == [0, 3]
    assert [p.name for p in tmp_path.iterdir()] == ["b.npz"]


def test_write_rejects_schema_violations(tmp_path):
    arrays = pack_samples(_samples())
    arrays["tokens"] = arrays["tokens"].astype(np.int64)
    with pytest.raises(ValueError, match="tokens"):
        write_batch(tmp_path / "x.npz", arrays, {})
    arrays = pack_samples(_samples())
    arrays["positions"] = np.arange(5, dtype=np.int32)
    with pytest.raises(ValueError, match="positions"):
        write_batch(tmp_path / "x.npz", arrays, {})
    assert list(tmp_path.iterdir()) == []


def test_batch_module_does_not_import_torch():
    code = "import sys, swefleet.batch; sys.exit('torch' in sys.modules)"
    root = Path(__file__).resolve().parents[2]
    assert subprocess.run([sys.executable, "-c", code], cwd=root, check=False).returncode == 0
