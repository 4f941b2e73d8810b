"""Task difficulty: pass rates recorded from an eval's report into the task file, and RL's
selection by them (always / never solved skipped and counted, unmeasured kept)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from swefleet.envs.difficulty import pass_rates, record_difficulty, select_by_difficulty
from swefleet.envs.tasks import load_tasks

from swefleet.app.cli import main
from swefleet.app.config import load_config

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "envs" / "data" / "quickstart" / "tasks.jsonl"
CONFIG = str(REPO / "configs" / "quickstart.toml")


def report(per_task: dict) -> dict:
    return {"schema": "swefleet.eval/2", "per_task": per_task}


def test_pass_rates_leave_infra_errors_out():
    rates = pass_rates(report({"a": [True, True], "b": [False, None, True], "c": [None]}))
    assert rates == {"a": (1.0, 2), "b": (0.5, 2)}


@pytest.fixture
def task_file(tmp_path) -> Path:
    """The quickstart task file, copied with its source folders (records point at them)."""
    folder = tmp_path / "quickstart"
    shutil.copytree(QUICKSTART.parent, folder)
    return folder / "tasks.jsonl"


def _eval_dir(tmp_path, per_task) -> Path:
    out = tmp_path / "eval"
    out.mkdir()
    (out / "report.json").write_text(json.dumps(report(per_task)))
    return out


def test_difficulty_command_records_and_rl_skips_by_it(tmp_path, task_file, capsys):
    ids = [t.instance_id for t in load_tasks(task_file, split="train")]
    assert len(ids) >= 4
    always, never, between = ids[0], ids[1], ids[2]
    evaluated = _eval_dir(tmp_path, {always: [True] * 4, never: [False] * 4,
                                     between: [True, False, None, False]})
    code = main(["tasks", "difficulty", "--tasks", str(task_file), "--eval", str(evaluated),
                 "--key", "m-k4"])
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and out == {"key": "m-k4", "tasks_recorded": 3, "always_solved": 1,
                                 "never_solved": 1, "in_between": 1}
    records = {json.loads(line)["instance_id"]: json.loads(line)
               for line in task_file.read_text().splitlines()}
    assert records[between]["difficulty"] == {"m-k4": {"pass_rate": 0.3333, "attempts": 3}}
    assert "difficulty" not in records[ids[3]]

    from swefleet.app.rl import training_tasks

    sets = [f"tasks.path={json.dumps(str(task_file))}", 'tasks.difficulty_key="m-k4"']
    kept = training_tasks(load_config(CONFIG, [*sets, "tasks.skip_always_solved=true",
                                               "tasks.skip_never_solved=true"]), rl=True)
    assert [t.instance_id for t in kept] == [i for i in ids if i not in (always, never)]
    assert len(training_tasks(load_config(CONFIG, sets), rl=True)) == len(ids)  # no skip asked
    assert len(training_tasks(load_config(CONFIG, [*sets, "tasks.skip_never_solved=true"]))) \
        == len(ids)  # sft (rl=False) never skips


def test_selection_counts_and_unmeasured_tasks_are_kept(task_file):
    tasks = load_tasks(task_file, split="train")
    records = [t.model_dump() for t in tasks]
    record_difficulty(records, {tasks[0].instance_id: (1.0, 8)}, "k")
    marked = [t.model_copy(update={"difficulty": r.get("difficulty")}) for t, r in
              zip(tasks, records, strict=True)]
    kept, counts = select_by_difficulty(marked, "k", skip_always=True, skip_never=True)
    assert len(kept) == len(tasks) - 1
    assert counts == {"always_solved": 1, "never_solved": 0, "unmeasured": len(tasks) - 1}


def test_skips_without_a_key_and_a_missing_report_are_refused(tmp_path, task_file, capsys):
    with pytest.raises(ValueError, match="set tasks.difficulty_key"):
        load_config(CONFIG, ["tasks.skip_never_solved=true"])
    code = main(["tasks", "difficulty", "--tasks", str(task_file), "--eval", str(tmp_path),
                 "--key", "k"])
    err = capsys.readouterr().err
    assert code == 2 and "no report.json" in err and err.count("\n") == 1
    code = main(["tasks", "difficulty", "--tasks", str(task_file), "--eval",
                 str(_eval_dir(tmp_path, {"other__task-1": [True]})), "--key", "k"])
    assert code == 2 and "none of its 1 tasks" in capsys.readouterr().err
