"""Weight sync by broadcast, the parts without a process group: where a version is published,
what a resumed run can reload, which versions the trainer exports, the group's epochs."""

from __future__ import annotations

import json

import pytest
from swefleet.orchestrator.weight_sync import current_group, new_group_epoch, regroup_after_restart
from swefleet.trainer.config import TrainerJob
from swefleet.trainer.weight_broadcast import WeightBroadcaster

from swefleet.rundir import RunDir, write_json_atomic
from swefleet.weight_transfer import (
    BroadcastMarker,
    TransferGroup,
    UpdateInfo,
    marker_path,
    read_marker,
)

pytestmark = pytest.mark.unit

GROUP = TransferGroup(master_address="127.0.0.1", master_port=29500, world_size=3)


def broadcasting(run: RunDir) -> None:
    job = {"model": "m", "batches_dir": "b", "weights_dir": str(run.weights),
           "weight_sync": {"group": GROUP.model_dump(mode="json")}}
    TrainerJob.model_validate(job)  # the section the orchestrator writes is a valid job
    write_json_atomic(run.root / "trainer_job.json", job)


def test_weights_path_is_the_directory_or_the_marker(tmp_path):
    run = RunDir(tmp_path)
    assert run.weights_path(1) == run.weights / "v000001"  # nothing yet, a directory run
    broadcasting(run)
    assert run.weights_path(1) == marker_path(run.weights, 1)  # nothing yet, a broadcast run
    (run.weights / "v000001").mkdir()
    marker_path(run.weights, 1).write_text("{}")
    assert run.weights_path(1) == run.weights / "v000001"  # the directory first
    marker_path(run.weights, 2).write_text("{}")
    assert run.weights_path(2) == marker_path(run.weights, 2)


def test_resume_reloads_the_newest_directory_and_forgets_later_broadcasts(tmp_path):
    run = RunDir(tmp_path)
    for v in (1, 3, 4):
        marker_path(run.weights, v).write_text("{}")
    (run.weights / "v000002").mkdir()
    assert run.reloadable_version(4) == 2
    assert sorted(p.name for p in run.weights.iterdir()) == ["v000001.nccl.json", "v000002"]
    assert run.reloadable_version(1) == 0  # only broadcasts: the initial model


def test_the_trainer_exports_checkpoint_and_last_versions_only():
    job = TrainerJob.model_validate({
        "model": "m", "batches_dir": "b", "weights_dir": "w", "max_steps": 10,
        "trainer": {"checkpoint_every": 4},
        "weight_sync": {"group": GROUP.model_dump(mode="json"), "bucket_mb": 8}})
    b = WeightBroadcaster.from_job(job, rank=0, published_through=0)
    assert [v for v in range(1, 11) if b.exports(v)] == [4, 8, 10]
    assert b.bucket_bytes == 8 << 20 and b.group == GROUP
    job.weight_sync = None
    assert WeightBroadcaster.from_job(job, rank=0, published_through=0) is None


def test_a_retrained_version_is_not_broadcast_again(tmp_path):
    b = WeightBroadcaster(GROUP, 1 << 20, tmp_path, rank=0, published_through=4)
    assert b.publish(policy=None, version=3) == (marker_path(tmp_path, 3), {})
    assert not marker_path(tmp_path, 3).exists()  # no marker: nobody waits for it


def test_new_group_epoch_is_announced_for_the_trainer(tmp_path):
    run = RunDir(tmp_path)
    with pytest.raises(ValueError, match="does not broadcast"):
        new_group_epoch(run)
    broadcasting(run)
    assert current_group(run) == GROUP
    newer = new_group_epoch(run, world_size=5)
    assert (newer.epoch, newer.world_size, newer.master_port) == (1, 5, 29500)
    assert current_group(run) == newer and newer.key != GROUP.key
    trainer = WeightBroadcaster(GROUP, 1 << 20, run.weights, rank=0)
    assert trainer._current_group() == newer  # joined before its next broadcast


def test_a_server_restart_announces_the_next_epoch_only_when_the_trainer_broadcasts(tmp_path):
    run = RunDir(tmp_path)
    assert regroup_after_restart(run) is None  # no trainer job (yet): nothing to re-form
    broadcasting(run)
    assert regroup_after_restart(run).epoch == 1
    assert regroup_after_restart(run) == current_group(run) == GROUP.model_copy(update={"epoch": 2})


def test_marker_and_update_info_schema(tmp_path):
    info = UpdateInfo(names=["a", "b"], dtype_names=["bfloat16", "float32"],
                      shapes=[[2, 3], []])
    assert info.sizes() == [12, 4] and info.total_bytes == 16
    path = marker_path(tmp_path, 12)
    path.write_text(BroadcastMarker(version=12, group=GROUP, update_info=info).model_dump_json())
    assert read_marker(path).update_info == info and path.name == "v000012.nccl.json"
    assert set(json.loads(path.read_text())["update_info"]) == {
        "names", "dtype_names", "shapes", "packed", "packed_buffer_size_bytes",
        "packed_num_buffers"}
    with pytest.raises(ValueError, match="cannot be sent"):
        UpdateInfo(names=["c"], dtype_names=["complex64"], shapes=[[1]]).sizes()


def test_retention_keeps_the_newest_directory_a_restart_reloads(tmp_path):
    from swefleet.orchestrator.retention import prune_weights

    run = RunDir(tmp_path)
    for v in (10, 20):
        (run.weights / f"v{v:06d}").mkdir()
    for v in range(21, 26):  # broadcast versions: markers only
        marker_path(run.weights, v).write_text("{}")
    assert prune_weights(run.weights, served=25, keep_last=3, keep_every=0) == [10]
    assert run.reloadable_version(25) == 20
