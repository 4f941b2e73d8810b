"""SWE-bench export rows (tests/fixtures/swebench) load as tasks mapped by swebench's own specs."""

from __future__ import annotations

import json
import logging
import subprocess
from pathlib import Path

import pytest
from swefleet.envs.gradelog import VERDICT, get_log_parser, regrade_from_log, swebench_harness
from swefleet.envs.swebench_rows import SETUP_LOG, is_swebench_export
from swefleet.envs.tasks import TaskFileError, load_tasks

from swefleet.types import GradeStatus, Task

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "swebench"
ROWS = FIXTURES / "rows.jsonl"
QUICKSTART = Path(__file__).resolve().parents[2] / "envs" / "data" / "quickstart" / "tasks.jsonl"


def rows() -> list[dict]:
    return [json.loads(line) for line in ROWS.read_text().splitlines()]


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def swebench_spec(row: dict):
    swebench_harness()
    from swebench.harness.utils import make_test_spec

    return make_test_spec(row)


def test_jsonl_and_parquet_exports_load_alike():
    from_jsonl = load_tasks(ROWS)
    from_parquet = load_tasks(FIXTURES / "rows.parquet")
    assert [t.instance_id for t in from_jsonl] == [
        "astropy__astropy-12907", "django__django-11099", "sympy__sympy-20590",
        "psf__requests-2317"]
    assert [t.model_dump() for t in from_parquet] == [t.model_dump() for t in from_jsonl]
    for task, row in zip(from_jsonl, rows()):
        assert task.FAIL_TO_PASS == json.loads(row["FAIL_TO_PASS"])  # JSON strings decoded
        assert task.PASS_TO_PASS == json.loads(row["PASS_TO_PASS"])
        assert (task.patch, task.test_patch, task.base_commit, task.version) == (
            row["patch"], row["test_patch"], row["base_commit"], row["version"])
        assert task.model_extra["eval_script"] == row["eval_script"]  # nothing dropped


def test_rows_map_to_swebench_test_specs():
    from swebench.harness.log_parsers import PARSER_REGISTRY
    from swebench.task.checks import expected_image

    for task, row in zip(load_tasks(ROWS), rows()):
        spec = swebench_spec(row)
        assert task.image == spec.image == expected_image(row["instance_id"])
        assert task.log_parser == spec.log_parser
        assert get_log_parser(task.log_parser) is PARSER_REGISTRY[spec.log_parser]
        assert task.model_extra["eval_type"] == spec.eval_type
        assert (task.FAIL_TO_PASS, task.PASS_TO_PASS) == (spec.FAIL_TO_PASS, spec.PASS_TO_PASS)
        lines = spec.eval_script_list
        start = lines.index(": '>>>>> Start Test Output'")
        end = lines.index(": '>>>>> End Test Output'")
        script = test_script(task)
        assert "\n".join(lines[start + 1 : end]) in script  # the test command, exit code kept
        assert "source /opt/miniconda3/bin/activate\nconda activate testbed" in script
        assert "git apply" not in script and f"git checkout {row['base_commit']}" not in script
        assert task.workdir == "/testbed"
    django = load_tasks(ROWS)[1]
    assert django.image == "swebench/sweb.eval.x86_64.django_1776_django-11099:latest"
    assert "--settings=test_sqlite --parallel 1 auth_tests.test_validators" in django.test_cmd


def test_script(task: Task) -> str:
    """The script inside the task's `bash -c '...' swebench-eval` test command."""
    import shlex

    argv = shlex.split(task.test_cmd)
    assert argv[:2] == ["bash", "-c"] and argv[3:] == ["swebench-eval"]
    return argv[2]


test_script.__test__ = False  # a helper, not a test


def test_eval_command_runs_setup_apart_and_exits_with_the_tests_status(tmp_path):
    lines = [
        "#!/bin/bash", "set -uxo pipefail",
        "export PROBE=activated", "echo setup-noise",
        "git checkout abc123 t.py",
        "git apply -v - <<'EOF_1234'", "diff --git a/t.py b/t.py", "", "EOF_1234",
        ": '>>>>> Start Test Output'",
        'echo "PASSED t.py::a $PROBE"; echo "args:$#"; false',
        ": '>>>>> End Test Output'",
        "git checkout abc123 t.py",
    ]
    row = {**rows()[3], "instance_id": "demo__demo-1", "base_commit": "abc123",
           "eval_script": "\n".join(lines)}
    (task,) = load_tasks(write_jsonl(tmp_path / "t.jsonl", [row]))
    # the grader appends the test files: they must not reach the script
    proc = subprocess.run(["bash", "-c", f"{{ {task.test_cmd} t.py other.py\n}} 2>&1"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=30, check=False)
    assert "PASSED t.py::a activated" in proc.stdout and "args:0" in proc.stdout
    assert "setup-noise" not in proc.stdout
    assert proc.returncode == 1  # the test line's status, not the last command's
    setup = Path(SETUP_LOG).read_text()
    assert "setup-noise" in setup and "git" not in setup


def test_malformed_rows_are_one_line_each_and_the_rest_load(tmp_path, caplog):
    good = rows()
    legacy = {k: v for k, v in good[0].items()
              if k not in ("image", "eval_script", "log_parser", "eval_type")}
    bad = [
        {**good[1], "instance_id": "bad__f2p-1", "FAIL_TO_PASS": "[not json"},
        {**legacy, "instance_id": "bad__legacy-1"},
        {**good[2], "instance_id": "bad__parser-1", "log_parser": "parse_log_nope"},
        {**good[3], "instance_id": "bad__markers-1", "eval_script": "#!/bin/bash\npytest\n"},
        {**good[0], "instance_id": "bad__type-1", "eval_type": "sometimes"},
        {**good[1], "instance_id": "bad__commit-1", "base_commit": None},
        {**good[2], "instance_id": "bad__text-1", "problem_statement": ["not", "text"]},
        {**good[0]},  # a second astropy__astropy-12907
    ]
    path = write_jsonl(tmp_path / "mixed.jsonl", good[:2] + bad + good[2:])
    with caplog.at_level(logging.WARNING, logger="swefleet.envs.tasks"):
        tasks = load_tasks(path)
    assert [t.instance_id for t in tasks] == [r["instance_id"] for r in good]
    lines = [r.getMessage() for r in caplog.records]
    expected = [(2, "bad__f2p-1", "FAIL_TO_PASS"), (3, "bad__legacy-1", "eval_script"),
                (4, "bad__parser-1", "log_parser"), (5, "bad__markers-1", "eval_script"),
                (6, "bad__type-1", "eval_type"), (7, "bad__commit-1", "base_commit"),
                (8, "bad__text-1", "problem_statement"),
                (9, "astropy__astropy-12907", "instance_id")]
    assert len(lines) == len(expected)
    for line, (i, iid, field) in zip(lines, expected):
        assert "\n" not in line
        assert f"{path}: record {i} (instance_id={iid!r}): field {field!r}" in line, line
    with pytest.raises(TaskFileError, match=r"record 0 \(instance_id='bad__legacy-1'\): field "
                       r"'eval_script': missing: a legacy export .* \(and 1 more\)$"):
        load_tasks(write_jsonl(tmp_path / "bad.jsonl", bad[1:3]))


def test_detection_by_columns():
    assert is_swebench_export(rows())
    quickstart = [json.loads(line) for line in QUICKSTART.read_text().splitlines()]
    assert not is_swebench_export(quickstart)  # swefleet's own fields (source_dir, ...)
    assert not is_swebench_export([{"instance_id": "a", "repo": "b"}])


def test_the_eval_command_loads_the_export(tmp_path):
    from swefleet.app.config import load_config
    from swefleet.app.rl import prepare_tasks

    cfg = load_config("", [f"tasks.path={json.dumps(str(ROWS))}"])
    cfg.tasks.split = None  # as `swefleet eval --tasks` without --split
    tasks = prepare_tasks(cfg)  # images named by the rows: no build, no Docker
    assert len(tasks) == 4 and all(t.image.startswith("swebench/sweb.eval.") for t in tasks)


def test_fail_only_rows_are_decided_as_swebench_does():
    def verdict_log(output: str) -> str:
        return (">>>>> Start Test Output\n" + output + "\n>>>>> End Test Output\n" + VERDICT
                + json.dumps({"phase": "tests", "exit_code": 1, "timed_out": False}) + "\n")

    task = Task(instance_id="x__y-1", repo="x/y", problem_statement="p", image="i",
                FAIL_TO_PASS=["t.py::a"], PASS_TO_PASS=["t.py::b"])
    log = verdict_log("FAILED t.py::c - boom\nPASSED t.py::b")
    assert regrade_from_log(task, log).status == GradeStatus.unresolved  # t.py::a not passed
    fail_only = Task(**task.model_dump(), eval_type="fail_only")
    assert regrade_from_log(fail_only, log).status == GradeStatus.resolved  # only FAILED counts
