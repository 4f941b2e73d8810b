"""Train/test separation: SWE-bench rows from a test split are split `test`, `swefleet rl` and
`sft` refuse them unless `tasks.allow_test_split`, runs record the task ids they train on, and
an eval of a checkpoint reports the overlap."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from swefleet.envs.swebench_rows import source_split
from swefleet.envs.tasks import load_tasks
from swefleet.evals.report import build_report, report_markdown
from swefleet.evals.trained_tasks import (
    TRAINED_TASKS,
    overlap_fields,
    record_path,
    record_trained_tasks,
)

from swefleet.app.cli import main
from swefleet.app.config import load_config

pytestmark = pytest.mark.unit

ROWS = Path(__file__).resolve().parents[1] / "fixtures" / "swebench" / "rows.jsonl"
CONFIG = str(Path(__file__).resolve().parents[2] / "configs" / "quickstart.toml")


def test_split_of_swebench_rows_comes_from_the_source():
    assert source_split("princeton-nlp/SWE-bench", "train") == "train"  # the Hub split loaded
    assert source_split("data/test-00000-of-00001.parquet") == "test"  # Hugging Face's naming
    assert source_split("swebench_lite_dev.jsonl") == "dev"
    assert source_split("swe_gym.train.jsonl") == "train"
    assert source_split("swebench_verified.parquet") == "test"  # names no split: test
    assert source_split("contest.jsonl") == "test"  # (a word, not a part of one: default)
    assert source_split("attest_train.jsonl") == "train"


def test_export_rows_load_as_test_unless_the_row_or_file_says_otherwise(tmp_path):
    assert {t.split for t in load_tasks(ROWS)} == {"test"}
    assert len(load_tasks(ROWS, split="test")) == 4 and load_tasks(ROWS, split="train") == []
    named = shutil.copy(ROWS, tmp_path / "gym-train.jsonl")
    assert {t.split for t in load_tasks(named)} == {"train"}
    rows = [json.loads(line) for line in ROWS.read_text().splitlines()]
    rows[0]["split"] = "train"  # a row's own split wins
    own = tmp_path / "rows.jsonl"
    own.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert [t.split for t in load_tasks(own)] == ["train", "test", "test", "test"]


def test_rl_refuses_test_tasks_with_one_line_and_exit_2(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["rl", "--config", CONFIG, "--set", f"tasks.path={json.dumps(str(ROWS))}",
                 "--set", "tasks.split=test", "--output-dir", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "4 of the 4 tasks to train on are of split 'test'" in err
    assert "tasks.allow_test_split = true" in err
    assert not out.exists()  # refused before the run directory
    code = main(["rl", "--config", CONFIG, "--set", f"tasks.path={json.dumps(str(ROWS))}",
                 "--output-dir", str(out)])
    err = capsys.readouterr().err  # the default split (train) finds none: say which there are
    assert code == 2 and "(split=train); its tasks are of split test" in err, err


def test_allow_test_split_lets_training_take_them():
    from swefleet.app.rl import training_tasks

    sets = [f"tasks.path={json.dumps(str(ROWS))}", "tasks.split=test"]
    assert len(training_tasks(load_config("", [*sets, "tasks.allow_test_split=true"]))) == 4
    with pytest.raises(ValueError, match="allow_test_split"):
        training_tasks(load_config("", sets))


def test_sft_refuses_oracle_test_tasks_before_any_file(tmp_path):
    from swefleet.app.sft import run_sft

    cfg = load_config("", [f"tasks.path={json.dumps(str(ROWS))}", "tasks.split=test",
                           "sft.steps=1"])
    with pytest.raises(ValueError, match="split 'test'"):
        run_sft(cfg, tmp_path / "sft")
    assert not (tmp_path / "sft").exists()


def test_record_merges_resumes_and_the_starting_checkpoint(tmp_path):
    sft = tmp_path / "sft"
    (sft / "weights" / "v000002").mkdir(parents=True)
    record_trained_tasks(sft, ["a", "b"], "tasks.jsonl")
    run = tmp_path / "rl"
    run.mkdir()
    record_trained_tasks(run, ["c"], "tasks.jsonl", start_model=sft / "weights" / "v000002")
    record_trained_tasks(run, ["d"], "more.jsonl")  # resumed with more tasks
    data = json.loads((run / TRAINED_TASKS).read_text())
    assert data["task_ids"] == ["a", "b", "c", "d"]
    assert data["sources"] == ["tasks.jsonl", str((sft / TRAINED_TASKS).resolve()), "more.jsonl"]
    (run / "weights" / "v000001").mkdir(parents=True)
    (run / "model").mkdir()
    assert record_path(run / "weights" / "v000001") == run / TRAINED_TASKS
    assert record_path(run / "model") is None  # the model a run starts from is not trained


def test_eval_report_shows_the_overlap_first(tmp_path):
    run = tmp_path / "rl"
    (run / "weights" / "v000003").mkdir(parents=True)
    record_trained_tasks(run, ["a", "b", "z"], "tasks.jsonl")
    records = [{"task_id": t, "attempt": 0, "resolved": t == "a"} for t in ("a", "b", "c")]
    report = build_report(records, 1)
    report.update(overlap_fields(run / "weights" / "v000003", ["a", "b", "c"]))
    overlap = report["trained_overlap"]
    assert (overlap["n_overlap"], overlap["n_evaluated"], overlap["n_trained"]) == (2, 3, 3)
    assert overlap["overlap_ids"] == ["a", "b"]
    lines = report_markdown(report).splitlines()
    assert lines[2].startswith("- **trained on 2 of the 3 evaluated tasks**") and "a, b" in lines[2]
    unknown = overlap_fields(tmp_path / "elsewhere", ["a"])["trained_overlap"]
    assert unknown["record"] is None and unknown["n_overlap"] is None
    assert "unknown" in report_markdown({**report, "trained_overlap": unknown}).splitlines()[2]
    assert "trained" not in report_markdown(build_report(records, 1))  # other agents: no line


def test_rl_refuses_heldout_tasks_too():
    from swefleet.envs.tasks import is_evaluation_split

    from swefleet.app.rl import training_tasks

    with pytest.raises(ValueError, match=r"of split 'heldout' .*allow_test_split"):
        training_tasks(load_config(CONFIG, ["tasks.split=heldout"]))
    assert training_tasks(load_config(CONFIG, ["tasks.split=heldout",
                                               "tasks.allow_test_split=true"]))
    assert [is_evaluation_split(s) for s in ("test", "heldout", "heldout_repo", "train", None)] \
        == [True, True, True, False, False]
