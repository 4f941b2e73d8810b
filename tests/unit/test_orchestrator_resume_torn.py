"""A batch write cut by a kill (its hidden temp file in `batches/`) is removed when the run
starts again; finished batches and other files stay."""

import pytest
from swefleet.orchestrator.resume import remove_torn_batches

from swefleet.rundir import RunDir, write_atomic

pytestmark = pytest.mark.unit


def test_torn_batch_writes_are_removed_and_finished_batches_kept(tmp_path):
    run_dir = RunDir(tmp_path / "run")
    run_dir.batches.mkdir(parents=True, exist_ok=True)
    write_atomic(run_dir.batch_path(0), lambda f: f.write(b"batch 0"))
    torn = [".step_000001.npz.tmp-4242-0a1b2c3d", ".step_000001.npz.tmp-soak"]
    for name in torn:
        (run_dir.batches / name).write_bytes(b"half a batch")
    (run_dir.batches / "notes.txt").write_text("not a temp file")

    assert remove_torn_batches(run_dir) == sorted(torn)
    assert sorted(p.name for p in run_dir.batches.iterdir()) == [
        "notes.txt", run_dir.batch_path(0).name]
    assert run_dir.batch_path(0).read_bytes() == b"batch 0"
    assert remove_torn_batches(run_dir) == []


def test_a_run_dir_without_batches_is_fine(tmp_path):
    assert remove_torn_batches(RunDir(tmp_path / "fresh")) == []
