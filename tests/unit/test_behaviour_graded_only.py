"""`tasks.behaviour_graded_only`: runs keep only tasks whose twins end with behaviour probes,
record what was dropped, and evals report how many of their tasks are graded by behaviour."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from swefleet.envs.behaviour import graded_by_behaviour
from swefleet.envs.tasks import load_tasks
from swefleet.evals.report import behaviour_fields, build_report, report_markdown

from swefleet.app.config import load_config
from swefleet.app.rl import configured_tasks, rl_task_selection, training_tasks

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "envs" / "data" / "quickstart" / "tasks.jsonl"
CONFIG = str(REPO / "configs" / "quickstart.toml")


@pytest.fixture
def task_file(tmp_path) -> Path:
    """The quickstart tasks (all probed but the last: its issue spells out the gold values)
    with the probes of the first two removed, and the third's probes left with no deciding
    call."""
    folder = tmp_path / "quickstart"
    shutil.copytree(QUICKSTART.parent, folder)
    path = folder / "tasks.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert all(r.get("probes") for r in records[:6]) and records[2]["split"] == "train"
    for r in records[:2]:
        del r["probes"]
    for probe in records[2]["probes"].values():
        for call in probe["calls"]:
            call["decides"] = False
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def _config(task_file: Path, *sets: str):
    return load_config(CONFIG, [f"tasks.path={json.dumps(str(task_file))}", *sets])


def test_a_task_is_graded_by_behaviour_only_with_a_deciding_probe(task_file):
    graded = [graded_by_behaviour(t) for t in load_tasks(task_file)]
    assert graded == [False, False, False, True, True, True, False]


def test_runs_drop_tasks_with_constant_checks_only_before_the_limit(task_file):
    everything = training_tasks(_config(task_file), rl=True)
    assert len(everything) == 4  # the train split, nothing dropped by default
    only = _config(task_file, "tasks.behaviour_graded_only=true")
    kept = training_tasks(only, rl=True)
    assert [t.instance_id for t in kept] == [everything[3].instance_id]
    assert rl_task_selection(only)[1] == {"behaviour_graded_only": True, "in_split": 4,
                                          "dropped_constant_checks_only": 3}
    limited = _config(task_file, "tasks.behaviour_graded_only=true", "tasks.limit=1")
    assert [t.instance_id for t in configured_tasks(limited)] == [everything[3].instance_id]


def test_nothing_left_says_the_filter_emptied_the_set(task_file):
    cfg = _config(task_file, "tasks.behaviour_graded_only=true", "tasks.limit=1")
    records = [json.loads(line) for line in task_file.read_text().splitlines()]
    for r in records:
        r.pop("probes", None)
    task_file.write_text("".join(json.dumps(r) + "\n" for r in records))
    with pytest.raises(ValueError, match=r"split=train, graded by behaviour"):
        training_tasks(cfg, rl=True)


def test_the_eval_report_says_how_many_tasks_are_graded_by_behaviour(task_file):
    tasks = load_tasks(task_file)
    records = [{"task_id": t.instance_id, "resolved": False, "tokens": 1, "wall_s": 1.0}
               for t in tasks]
    report = build_report(records, 1) | behaviour_fields(tasks)
    assert report["behaviour_graded_tasks"] == 3 and report["selected_tasks"] == 7
    assert "- graded by behaviour probes: 3 of 7 tasks; 4 by constant checks only" \
        in report_markdown(report)
