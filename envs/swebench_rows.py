"""SWE-bench dataset rows as swefleet tasks, read through swebench's own code.

A SWE-bench >= 5 export (`SWE-bench/SWE-bench`, `_Verified`, `_Lite`, ..., as parquet or JSONL)
holds per row what evaluating it needs: `image`, `eval_script`, `log_parser` and `eval_type`
(swebench 5 moved the per-repo specs, `MAP_REPO_VERSION_TO_SPECS`, out of the package and into
the rows). Each row is turned into a `Task` with swebench's own functions:

- `swebench.harness.utils.make_test_spec` reads the row (image, eval script lines with the test
  command's exit code recorded, log parser, FAIL_TO_PASS / PASS_TO_PASS from their JSON strings);
- the image is the row's, else `swebench.task.checks.expected_image` (the harness's naming:
  `swebench/sweb.eval.x86_64.<id with __ -> _1776_>:latest`);
- the eval type is the row's, else `fail_only` for swebench's `FAIL_ONLY_REPOS`;
- the task's `test_cmd` is the eval script itself (environment activation, the repo's eval
  commands, its test command) less the two steps swefleet's grader does itself: resetting the
  test files to the base commit and applying the test patch (`eval_test_cmd`).

The legacy 12-column exports (`princeton-nlp/SWE-bench*`) carry no `eval_script`: the installed
swebench cannot evaluate them either, so such a row is an error naming that field.

A row without a `split` field takes the split of its source (`source_split`): the Hub split it
was loaded from, else the split its file name says (`test-00000-of-00001.parquet`,
`swebench_lite_dev.jsonl`), else `test`: SWE-bench's published sets are evaluation sets, so an
export that does not say otherwise is kept out of training (`swefleet rl` refuses test tasks).

A malformed row is one line naming the file, the row, its instance_id and the field; the other
rows still load (`read_rows`).
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import PurePath

from swefleet.envs.gradelog import END_TEST_OUTPUT, START_TEST_OUTPUT, swebench_harness

#: Columns every SWE-bench row has; with `eval_script` or `environment_setup_commit` and none
#: of swefleet's own fields they mark a file as a SWE-bench export.
SWEBENCH_COLUMNS = (
    "instance_id",
    "repo",
    "base_commit",
    "patch",
    "test_patch",
    "problem_statement",
    "FAIL_TO_PASS",
    "PASS_TO_PASS",
    "version",
)
_SWEFLEET_FIELDS = ("source_dir", "recipe", "source_patch", "test_cmd", "test_files", "workdir")
#: Where the eval script's setup steps write their output (kept out of the parsed test output,
#: as SWE-bench keeps it before its start marker).
SETUP_LOG = "/tmp/swefleet-eval-setup.log"
_HEREDOC = re.compile(r"<<-?\s*'?([A-Za-z_][A-Za-z0-9_]*)'?\s*$")
#: Split names a file name may carry (Hugging Face's `<split>-00000-of-00001.parquet`).
_SPLIT_WORDS = ("train", "dev", "validation", "test")
#: The split of SWE-bench rows whose source names none.
DEFAULT_SPLIT = "test"


class RowError(ValueError):
    """One malformed row: the field and what is wrong with it."""

    def __init__(self, field_name: str, message: str):
        super().__init__(f"field {field_name!r}: {message}")
        self.field = field_name


@dataclass
class Rows:
    """The task records of the rows that map and one line per row that does not, each with its
    row index."""

    records: list[tuple[int, dict]] = field(default_factory=list)
    errors: list[tuple[int, str]] = field(default_factory=list)


def is_swebench_export(records: list) -> bool:
    """Whether `records` are SWE-bench rows (by their columns): the first record has the
    SWE-bench columns and `eval_script` or `environment_setup_commit`, and no record sets one
    of swefleet's own fields (`source_dir`, `recipe`, `test_cmd`, ...)."""
    if not records or not isinstance(records[0], dict):
        return False
    first = records[0]
    if not all(c in first for c in SWEBENCH_COLUMNS):
        return False
    if "eval_script" not in first and "environment_setup_commit" not in first:
        return False
    return not any(
        isinstance(r, dict) and any(r.get(k) is not None for k in _SWEFLEET_FIELDS)
        for r in records
    )


def source_split(source: str, hub_split: str | None = None) -> str:
    """The split of rows from `source` that carry none: the Hub split they were loaded from,
    else the split word of the file name (its `-`/`_`/`.`-separated parts), else `test`."""
    if hub_split:
        return hub_split
    words = re.split(r"[^a-z0-9]+", PurePath(source).stem.lower())
    return next((w for w in words if w in _SPLIT_WORDS), DEFAULT_SPLIT)


def read_rows(records: list, where: str, split: str = DEFAULT_SPLIT) -> Rows:
    """Map every row (`task_record`; rows without a split get `split`); a bad row becomes one
    line in `errors`."""
    out = Rows()
    for i, row in enumerate(records):
        iid = row.get("instance_id") if isinstance(row, dict) else None
        try:
            out.records.append((i, task_record(row, split)))
        except RowError as e:
            out.errors.append((i, f"{where}: record {i} (instance_id={iid!r}): {e}"))
    return out


def task_record(row: Mapping, split: str = DEFAULT_SPLIT) -> dict:
    """A swefleet task record for one SWE-bench row (a RowError names the bad field); its
    `split` is the row's, else `split`."""
    if not isinstance(row, Mapping):
        raise RowError("(row)", "not a JSON object")
    for name in SWEBENCH_COLUMNS:
        if row.get(name) is None:
            raise RowError(name, "missing")
    for name in ("instance_id", "repo", "base_commit", "test_patch", "version"):
        if not isinstance(row[name], str):
            raise RowError(name, f"must be a string, not {type(row[name]).__name__}")
    script = row.get("eval_script")
    if not isinstance(script, str) or not script.strip():
        raise RowError(
            "eval_script",
            "missing: a legacy export (princeton-nlp/SWE-bench*) without the eval script, "
            "image, log_parser and eval_type columns that swebench >= 5 evaluates from; "
            "export SWE-bench/SWE-bench_Verified (or _Lite, ...) instead",
        )
    spec = test_spec(row)
    record = {k: v for k, v in row.items() if v is not None}
    record.update(
        image=spec.image,
        log_parser=spec.log_parser,
        eval_type=spec.eval_type,
        FAIL_TO_PASS=spec.FAIL_TO_PASS,
        PASS_TO_PASS=spec.PASS_TO_PASS,
        test_cmd=eval_test_cmd(spec.eval_script_list, row["base_commit"]),
        workdir=_container_workdir(),
    )
    record.setdefault("split", split)
    return record


def test_spec(row: Mapping):
    """swebench's `TestSpec` for the row (`make_test_spec`), the image and eval type filled in
    the harness's way when the row has none."""
    swebench_harness()
    from swebench.harness.constants import FAIL_ONLY_REPOS, EvalType
    from swebench.harness.log_parsers import PARSER_REGISTRY
    from swebench.harness.utils import make_test_spec
    from swebench.task.checks import expected_image

    instance = dict(row)
    for name in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        instance[name] = _test_list(row[name], name)
    instance["image"] = row.get("image") or expected_image(row["instance_id"])
    default_type = EvalType.FAIL_ONLY if row["repo"] in FAIL_ONLY_REPOS else EvalType.PASS_AND_FAIL
    instance["eval_type"] = row.get("eval_type") or default_type.value
    if instance["eval_type"] not in {t.value for t in EvalType}:
        known = ", ".join(t.value for t in EvalType)
        raise RowError("eval_type", f"{instance['eval_type']!r} is not one of {known}")
    if not row.get("log_parser"):
        raise RowError("log_parser", "missing")
    if row["log_parser"] not in PARSER_REGISTRY:
        raise RowError("log_parser", f"{row['log_parser']!r} is not a swebench log parser")
    try:
        return make_test_spec(instance)
    except (KeyError, TypeError, ValueError) as e:  # image_assets, ...: name what failed
        name = str(e.args[0]) if isinstance(e, KeyError) else "image_assets"
        raise RowError(name, str(e)) from None


def _test_list(value, name: str) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            raise RowError(name, "a string that is not a JSON list") from None
    if hasattr(value, "tolist"):  # a numpy array, as pandas gives parquet lists
        value = value.tolist()
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise RowError(name, "must be a list of test ids (or its JSON string)")
    return value


def eval_test_cmd(script_lines: list[str], base_commit: str) -> str:
    """The eval script as one command for swefleet's grader: `set -uxo pipefail`, the setup
    steps before SWE-bench's start marker (their output to `SETUP_LOG`), then the test lines
    between the markers, exiting with the test command's own status (swebench's recorded
    `SWEBENCH_TEST_EXIT_CODE`). Dropped: resetting the test files to `base_commit`, applying the
    test patch (the grader has done both) and the reset after the tests. It runs under `bash -c`
    and clears its arguments: the test file names the grader appends do not reach it (the
    eval script's test command names its own)."""
    from swebench.harness.constants import TEST_EXIT_CODE_VAR

    start = _marker_line(script_lines, START_TEST_OUTPUT)
    end = _marker_line(script_lines, END_TEST_OUTPUT)
    if end < start:
        raise RowError("eval_script", "its end marker comes before its start marker")
    setup = _without_test_patch_steps(script_lines[:start], base_commit)
    tests = script_lines[start + 1 : end]
    lines = ["set -- && set -uxo pipefail", "{", *setup, f"}} > {SETUP_LOG} 2>&1", *tests]
    if any(line.startswith(f"{TEST_EXIT_CODE_VAR}=") for line in tests):
        lines.append(f'exit "${TEST_EXIT_CODE_VAR}"')
    return f"bash -c {shlex.quote(chr(10).join(lines))} swebench-eval"


def _marker_line(lines: list[str], marker: str) -> int:
    for i, line in enumerate(lines):
        if marker in line:
            return i
    raise RowError("eval_script", f"no {marker!r} line")


def _without_test_patch_steps(lines: list[str], base_commit: str) -> list[str]:
    """`lines` less `git checkout <base_commit> <test files>` and the `git apply` heredoc that
    applies the test patch."""
    kept, delimiter = [], None
    for line in lines:
        if delimiter is not None:
            if line == delimiter:
                delimiter = None
            continue
        heredoc = _HEREDOC.search(line)
        if line.startswith("git apply") and heredoc:
            delimiter = heredoc.group(1)
            continue
        if base_commit and line.startswith(f"git checkout {base_commit} "):
            continue
        kept.append(line)
    return kept


def _container_workdir() -> str:
    """swebench's CONTAINER_WORKDIR (`/testbed`), without running `image_builder/__init__.py`
    (it imports docker), as `gradelog.swebench_harness` does for the harness."""
    import importlib.util
    import sys
    from pathlib import Path

    import swebench

    name = "swebench.image_builder.constants"
    if name not in sys.modules:
        path = Path(swebench.__file__).parent / "image_builder" / "constants" / "__init__.py"
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module.CONTAINER_WORKDIR
    return sys.modules[name].CONTAINER_WORKDIR
