"""A run is finished for N steps when every batch was handed over and policy vN is a durable
checkpoint: a restart of it has nothing to do (no server, no trainer, no write)."""

import pytest
from swefleet.orchestrator.resume import finished

from swefleet.rundir import DURABLE_MARKER, RunDir

pytestmark = pytest.mark.unit


def _run(tmp_path, batches: int, versions: dict[int, bool]) -> RunDir:
    """`batches` batch files; versions -> durable (its `.durable` marker written)."""
    run = RunDir(tmp_path / "run")
    for i in range(batches):
        run.batch_path(i).write_bytes(b"batch")
    for v, durable in versions.items():
        d = run.weights / f"v{v:06d}"
        d.mkdir()
        (d / "config.json").write_text("{}")
        if durable:
            (d / DURABLE_MARKER).write_text("")
    return run


def test_every_batch_and_the_final_durable_version_make_a_finished_run(tmp_path):
    assert finished(_run(tmp_path, 3, {2: True, 3: True}), steps=3)


@pytest.mark.parametrize(("batches", "versions"), [
    (3, {2: True}),             # the final version was never published
    (3, {2: True, 3: False}),   # published, not yet durable: a crash may have torn it
    (2, {2: True, 3: True}),    # a batch is missing
])
def test_a_run_short_of_the_final_version_or_a_batch_is_not_finished(tmp_path, batches,
                                                                      versions):
    assert not finished(_run(tmp_path, batches, versions), steps=3)


def test_more_steps_than_were_run_is_not_finished(tmp_path):
    run = _run(tmp_path, 3, {3: True})
    assert finished(run, steps=2) and not finished(run, steps=4)
