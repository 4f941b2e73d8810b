"""Published weights beyond the newest few are deleted once a newer version is served."""

import pytest
from swefleet.orchestrator.retention import prune_weights

pytestmark = pytest.mark.unit


def _publish(root, versions):
    for v in versions:
        d = root / f"v{v:06d}"
        d.mkdir(parents=True)
        (d / "model.safetensors").write_bytes(b"x")


def test_keeps_newest_and_every_kth(tmp_path):
    _publish(tmp_path, range(1, 13))
    (tmp_path / "v000003.nccl.json").write_text("{}")  # not a checkpoint dir: untouched
    (tmp_path / ".tmp-v000013").mkdir()  # the trainer's work in progress: untouched
    deleted = prune_weights(tmp_path, served=12, keep_last=3, keep_every=5)
    assert deleted == [1, 2, 3, 4, 6, 7, 8, 9]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == [".tmp-v000013", "v000003.nccl.json", "v000005", "v000010", "v000011",
                    "v000012"]


def test_zero_keeps_all_and_unserved_versions_stay(tmp_path):
    _publish(tmp_path, range(1, 6))
    assert prune_weights(tmp_path, served=5, keep_last=0) == []
    # v4 and v5 were published but only v3 is served: nothing newer than served-keep_last goes
    assert prune_weights(tmp_path, served=3, keep_last=2) == [1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["v000002", "v000003", "v000004",
                                                          "v000005"]
