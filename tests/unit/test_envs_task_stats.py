"""`swefleet tasks stats`: per-package rows of a task file, held-out packages last, and the
totals the docs quote."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from swefleet.envs.task_stats import markdown_table, package_rows, summary

from swefleet.types import Task

pytestmark = pytest.mark.unit


def _task(pkg: str, bug: str, split: str, f2p: int, **extra) -> Task:
    return Task.model_validate({
        "instance_id": f"o__{pkg}-1.0.{bug}", "repo": f"o/{pkg}", "version": "1.0",
        "problem_statement": "x", "patch": "p", "split": split, "bug_kind": bug.split("__")[0],
        "image": "img",
        "FAIL_TO_PASS": [f"t::a{i}" for i in range(f2p)], "PASS_TO_PASS": ["t::b"], **extra})


TASKS = [_task("zeta", "off_by_one__1", "train", 1, reproduction="print(1)"),
         _task("zeta", "wrong_call__2", "train", 3),
         _task("zeta", "wrong_call__3", "heldout_instance", 8, probes={"f": []}),
         _task("alpha", "off_by_one__4", "heldout", 2)]


def test_rows_count_splits_sizes_and_extras():
    zeta, alpha = package_rows(TASKS)
    assert (zeta.package, alpha.package) == ("o/zeta 1.0", "o/alpha 1.0")  # held out last
    assert zeta.splits == {"train": 2, "heldout_instance": 1} and zeta.tasks == 3
    assert zeta.fail_to_pass == (3, 8) and (zeta.reproduced, zeta.probed) == (1, 1)


def test_table_and_summary_totals():
    table = markdown_table(package_rows(TASKS)).splitlines()
    assert table[0].startswith("| package | train | heldout_instance | heldout |")
    assert table[-1].startswith("| **2 packages, 4 tasks** | 2 | 1 | 1 |")
    total = summary(TASKS)
    assert total["splits"] == {"heldout": 1, "heldout_instance": 1, "train": 2}
    assert total["packages_per_split"] == {"heldout": 1, "heldout_instance": 1, "train": 1}
    assert total["bug_kinds"] == {"off_by_one": 2, "wrong_call": 2}


def test_command_prints_the_table_then_one_json_line(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps(t.model_dump()) + "\n" for t in TASKS))
    out = subprocess.run([sys.executable, "-m", "swefleet", "tasks", "stats", "--tasks",
                          str(path), "--split", "train,heldout"], capture_output=True, text=True,
                         check=True).stdout.splitlines()  # fmt: skip
    assert json.loads(out[-1])["tasks"] == 3
    assert out[-2].startswith("| **2 packages, 3 tasks**")


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path):
    path = tmp_path / "t.jsonl"
    many = [_task(f"p{i}", "off_by_one__1", "train", 1) for i in range(3000)]  # > a pipe's buffer
    path.write_text("".join(json.dumps(t.model_dump()) + "\n" for t in many))
    proc = subprocess.Popen([sys.executable, "-m", "swefleet", "tasks", "stats", "--tasks",
                             str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().startswith(b"| package |")
    proc.stdout.close()  # as `| head -1` does
    assert proc.wait(timeout=60) == 141 and proc.stderr.read() == b""
