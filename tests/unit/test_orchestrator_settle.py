"""Episodes a killed run started but never finished are settled on resume: recorded in
episodes.jsonl as `cancelled` with a reason, once, and never trained on."""

import pytest
from swefleet.orchestrator.resume import (
    UNFINISHED,
    find_resume_point,
    record_started,
    settle_unfinished,
)

from swefleet.rundir import RunDir, append_jsonl, read_jsonl
from swefleet.types import EpisodeStatus, Trajectory

pytestmark = pytest.mark.unit


def test_unfinished_episodes_are_settled_once(tmp_path):
    run_dir = RunDir(tmp_path / "run")
    for eid in ("a", "b", "c"):
        record_started(run_dir, Trajectory(episode_id=eid, task_id="t", group_id="g"))
    append_jsonl(run_dir.episodes, Trajectory(episode_id="a", task_id="t", group_id="g",
                                              status=EpisodeStatus.unresolved, reward=0.0))
    with open(run_dir.root / "episodes.started.jsonl", "ab") as f:  # torn by the kill
        f.write(b'{"episode_id": "d", "task')

    assert settle_unfinished(run_dir) == 2
    records = {r["episode_id"]: r for r in read_jsonl(run_dir.episodes)}
    assert set(records) == {"a", "b", "c"}
    for eid in ("b", "c"):
        assert records[eid]["status"] == "cancelled"
        assert records[eid]["reason"] == UNFINISHED
        assert records[eid]["group_id"] == "g" and records[eid]["reward"] is None
    assert settle_unfinished(run_dir) == 0  # a second resume adds nothing
    assert len(read_jsonl(run_dir.episodes)) == 3
    assert find_resume_point(run_dir).pending == []  # nothing scorable to train on
