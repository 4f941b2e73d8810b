"""Task sets: load SWE-bench-style records into `Task`s and give each one an image.

Sources (`load_tasks`):
- a local `.jsonl`, `.json` (a list of records) or `.parquet` file (JSON read as written,
  parquet with `datasets`); `split` then keeps the tasks whose `split` field equals it
  (`train` / `heldout` / `test`; SWE-bench rows without one: `envs/swebench_rows.py`), or
  one of a comma-separated list (`heldout,heldout_instance`: `split_names`);
- a Hugging Face Hub dataset name such as `princeton-nlp/SWE-bench_Verified`, read with
  `datasets.load_dataset(name, split=split or "test")` (needs network access and a cache, so it
  is unreachable on air-gapped machines; hub records carry no `image`/`source_dir`, so set
  `image` yourself, e.g. to SWE-bench's pre-built instance images).

Records use SWE-bench's field names; `FAIL_TO_PASS` / `PASS_TO_PASS` may be JSON-encoded
strings as on the Hub. Any problem raises `TaskFileError` naming the file, the record (index
and instance_id) and the field.

A task's `source_dir` is relative to the task file's directory (`resolve_source_dir`);
`prepare_task_images` builds one image per distinct source dir with `envs.images`. An optional
`source_patch` (a unified diff, path relative to the task file) is applied to the source dir in
the image, so tasks that differ by a small bug share one copy of the repository. A generated
task (`envs.synth`) has a `recipe` field instead (a recipe path relative to the task file): its
image is the package's sdist (downloaded by pip at build time) with the bug applied.
"""

from __future__ import annotations

import datetime
import json
import logging
import re
import tempfile
from pathlib import Path

from pydantic import ValidationError
from swefleet.envs.images import DEFAULT_BASE_IMAGE, ensure_task_image

from swefleet.types import Task

log = logging.getLogger(__name__)

FILE_SUFFIXES = (".jsonl", ".json", ".parquet")
#: Splits that are evaluation sets: `swefleet rl` / `sft` refuse to train on their tasks unless
#: `tasks.allow_test_split` is set; so is every split whose name starts with `heldout`
#: (`heldout`, `heldout_repo`, `heldout_instance`: `is_evaluation_split`).
TEST_SPLITS = frozenset({"test"})


def is_evaluation_split(split: str | None) -> bool:
    """Whether tasks of `split` are for evaluation only (`test`, `heldout*`)."""
    return bool(split) and (split in TEST_SPLITS or split.startswith("heldout"))
_HUB_NAME = re.compile(r"^[\w.-]+/[\w.-]+$")
_JSON_LIST_FIELDS = ("FAIL_TO_PASS", "PASS_TO_PASS", "test_files")


class TaskFileError(ValueError):
    """A task file or one of its records is malformed; the message says where."""


def split_names(split: str | None) -> frozenset[str] | None:
    """The split names `split` selects: one name, or a comma-separated list of them
    (`heldout,heldout_instance`); None selects every task."""
    if split is None:
        return None
    names = frozenset(name.strip() for name in split.split(","))
    if "" in names:
        raise TaskFileError(f"split {split!r}: an empty name in the list")
    return names


def split_label(split: str | None) -> str:
    """`split` as one word for folder names (`heldout+heldout_instance`)."""
    return "+".join(sorted(split_names(split) or {"all"}))


def load_tasks(source: str | Path, split: str | None = None) -> list[Task]:
    """Load and validate the tasks of a file or Hub dataset (see the module docstring)."""
    path = Path(source)
    if path.suffix in FILE_SUFFIXES or path.exists():
        tasks = validate_records(_read_file(path), str(path))
        names = split_names(split)
        return [t for t in tasks if names is None or t.split in names]
    if isinstance(source, str) and _HUB_NAME.match(source):
        return validate_records(_read_hub(source, split or "test"), source, split or "test")
    raise TaskFileError(f"{source}: no such task file, and not a Hub dataset name")


def _datasets():
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    # `load_dataset` otherwise sends a HEAD request to s3.amazonaws.com (a download counter),
    # even for a local file: traffic off this machine and up to 3 s without a network
    datasets.config.HF_UPDATE_DOWNLOAD_COUNTS = False
    return datasets


def _read_file(path: Path) -> list[dict]:
    if not path.is_file():
        raise TaskFileError(f"{path}: no such task file")
    if path.suffix not in FILE_SUFFIXES:
        raise TaskFileError(f"{path}: unknown task file type (use {', '.join(FILE_SUFFIXES)})")
    if path.suffix != ".parquet":  # arrow would unify types across records: see below
        return _read_json_records(path)
    try:
        with tempfile.TemporaryDirectory(prefix="swefleet-tasks-") as cache:
            ds = _datasets().load_dataset(
                "parquet", data_files=str(path), split="train", cache_dir=cache,
                keep_in_memory=True,
            )
            return ds.to_list()
    except Exception as e:  # datasets/arrow say neither which record nor which field
        cause = e.__cause__ or e
        raise TaskFileError(f"{path}: cannot be read: {type(cause).__name__}: {cause}") from e


def _read_json_records(path: Path) -> list:
    """The records of a JSON / JSONL file exactly as written. Not through arrow: its type
    unification across records fails on fields that differ in type (validation would not get
    to name the bad record and field) and silently rewrites nested objects whose keys differ
    (a task's `sandbox` override became a JSON string, its numbers strings). A JSON syntax
    error or invalid UTF-8 raises a TaskFileError naming the record or line."""
    text = _decode_utf8(path, path.read_bytes())
    if path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise TaskFileError(f"{path}: invalid JSON at line {e.lineno}: {e.msg}") from None
        return data if isinstance(data, list) else [data]
    records = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise TaskFileError(
                f"{path}: record {len(records)} (line {lineno}): invalid JSON: {e.msg}"
            ) from None
    return records


def _decode_utf8(path: Path, data: bytes) -> str:
    """`data` as UTF-8; invalid bytes raise a TaskFileError naming the line (never replaced:
    a patch or test id with a replacement character would silently be another one)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise TaskFileError(
            f"{path}: line {line}: invalid UTF-8 (byte {data[e.start]:#04x} at offset {e.start})"
        ) from None


def _read_hub(name: str, split: str) -> list[dict]:
    try:
        return _datasets().load_dataset(name, split=split).to_list()
    except Exception as e:
        raise TaskFileError(f"{name}: cannot load Hub dataset split {split!r}: {e}") from e


def validate_records(records: list[dict], where: str, hub_split: str | None = None) -> list[Task]:
    """Validate raw records into Tasks; `where` names the source in error messages. SWE-bench
    exports (detected by their columns) go through `_validate_swebench_rows`; their rows without
    a `split` take `hub_split` (the Hub split they came from), else the split the file name
    says, else `test` (`swebench_rows.source_split`)."""
    from swefleet.envs.swebench_rows import is_swebench_export, source_split

    if is_swebench_export(records):
        return _validate_swebench_rows(records, where, source_split(where, hub_split))
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for i, record in enumerate(records):
        task = _validate_record(record, f"{where}: record {i}")
        if task.instance_id in seen:
            raise TaskFileError(
                f"{where}: record {i} (instance_id={task.instance_id!r}): field "
                f"'instance_id': duplicate of record {seen[task.instance_id]}"
            )
        seen[task.instance_id] = i
        tasks.append(task)
    return tasks


def _validate_swebench_rows(records: list, where: str, split: str) -> list[Task]:
    """SWE-bench rows mapped by swebench's own specs (`envs/swebench_rows.py`). A malformed row
    is logged as one line naming the row and the field, and the other rows still load; a file
    with no good row raises the first of those lines."""
    from swefleet.envs.swebench_rows import read_rows

    rows = read_rows(records, where, split)
    errors, tasks, seen = list(rows.errors), [], set()
    for i, record in rows.records:
        try:
            task = _validate_record(record, f"{where}: record {i}")
        except TaskFileError as e:
            errors.append((i, str(e)))
            continue
        if task.instance_id in seen:
            errors.append((i, (f"{where}: record {i} (instance_id={task.instance_id!r}): field "
                              "'instance_id': duplicate")))
            continue
        seen.add(task.instance_id)
        tasks.append(task)
    errors = [line for _, line in sorted(errors)]
    for line in errors:
        log.warning("skipped a SWE-bench row: %s", line)
    if errors and not tasks:
        raise TaskFileError(errors[0] + (f" (and {len(errors) - 1} more)" if errors[1:] else ""))
    return tasks


def _validate_record(record: dict, where: str) -> Task:
    if not isinstance(record, dict):
        raise TaskFileError(f"{where}: not a JSON object")
    # arrow fills fields missing from some records with None (let the defaults apply) and
    # reads ISO date strings as timestamps (give them back as strings)
    data = {k: _undo_arrow(v) for k, v in record.items() if v is not None}
    where = f"{where} (instance_id={data.get('instance_id')!r})"
    for field in _JSON_LIST_FIELDS:
        if isinstance(data.get(field), str):
            try:
                data[field] = json.loads(data[field])
            except json.JSONDecodeError:
                raise TaskFileError(
                    f"{where}: field {field!r}: a string that is not a JSON list"
                ) from None
    try:
        task = Task.model_validate(data)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise TaskFileError(f"{where}: field {field!r}: {err['msg']}") from None
    _check_semantics(task, where)
    return task


def _undo_arrow(value):
    if isinstance(value, datetime.datetime):
        text = value.isoformat()
        return text + "Z" if value.tzinfo is None else text.replace("+00:00", "Z")
    if isinstance(value, datetime.date):
        return value.isoformat()
    return value


def _check_semantics(task: Task, where: str) -> None:
    if not task.instance_id.strip():
        raise TaskFileError(f"{where}: field 'instance_id': must not be empty")
    if task.instance_id in (".", "..") or "/" in task.instance_id or "\0" in task.instance_id:
        raise TaskFileError(
            f"{where}: field 'instance_id': must not contain '/' or NUL, nor be '.' or '..' "
            "(it names a folder of the SWE-bench report)"
        )
    _check_sandbox_override(task, where)
    _check_text(task, where)
    from swefleet.envs.gradelog import get_log_parser

    try:
        get_log_parser(task.log_parser)
    except ValueError as e:
        raise TaskFileError(f"{where}: field 'log_parser': {e}") from None
    eval_type = (task.model_extra or {}).get("eval_type")
    if eval_type is not None and eval_type not in ("pass_and_fail", "fail_only"):
        raise TaskFileError(
            f"{where}: field 'eval_type': {eval_type!r} is not pass_and_fail or fail_only"
        )
    if not task.image and not task.source_dir and not recipe_of(task):
        raise TaskFileError(f"{where}: field 'image': neither 'image' nor 'source_dir' is set")


def _check_text(task: Task, where: str) -> None:
    """Every string (and list of strings) must be writable as UTF-8: a JSON escape such as
    `\\ud800` gives a lone surrogate, which no patch, test id or prompt can carry."""
    for name, value in task:
        for text in value if isinstance(value, list) else [value]:
            if not isinstance(text, str):
                continue
            try:
                text.encode()
            except UnicodeEncodeError as e:
                raise TaskFileError(
                    f"{where}: field {name!r}: not valid text ({e.reason} at character {e.start})"
                ) from None


def _check_sandbox_override(task: Task, where: str) -> None:
    """The optional `sandbox` field must be an object of valid `SandboxLimits` fields (checked
    here, not when a sandbox is first made for the task in the middle of a run)."""
    from swefleet.envs.config import TASK_LIMITS_FIELD, SandboxLimits

    override = (task.model_extra or {}).get(TASK_LIMITS_FIELD)
    if override is None:
        return
    field = f"field {TASK_LIMITS_FIELD!r}"
    if not isinstance(override, dict):
        raise TaskFileError(f"{where}: {field}: must be an object of sandbox limits")
    try:
        SandboxLimits.model_validate(override)
    except ValidationError as e:
        err = e.errors()[0]
        loc = ".".join(str(p) for p in (TASK_LIMITS_FIELD, *err["loc"]))
        raise TaskFileError(f"{where}: field {loc!r}: {err['msg']}") from None


def recipe_of(task: Task) -> str:
    """The task's `recipe` field (a generated task: its image is built from the recipe, see
    `envs.synth`), or ''."""
    recipe = (task.model_extra or {}).get("recipe") or ""
    return recipe if isinstance(recipe, str) else ""


def resolve_source_dir(task: Task, tasks_file: str | Path) -> Path:
    """`task.source_dir` resolved against the directory of the task file; must exist."""
    if not task.source_dir:
        raise TaskFileError(
            f"{tasks_file}: instance_id={task.instance_id!r}: field 'source_dir': not set"
        )
    path = (Path(tasks_file).parent / task.source_dir).resolve()
    if not path.is_dir():
        raise TaskFileError(
            f"{tasks_file}: instance_id={task.instance_id!r}: field "
            f"'source_dir': {path} is not a directory"
        )
    return path


def source_patch_of(task: Task, tasks_file: str | Path) -> bytes:
    """The bytes of the task's `source_patch` file (relative to the task file), or b''."""
    name = (task.model_extra or {}).get("source_patch") or ""
    if not name:
        return b""
    path = Path(tasks_file).parent / name
    if not path.is_file():
        raise TaskFileError(
            f"{tasks_file}: instance_id={task.instance_id!r}: field 'source_patch': "
            f"{path} is not a file"
        )
    return path.read_bytes()


def prepare_task_images(
    tasks: list[Task], tasks_file: str | Path, base_image: str = DEFAULT_BASE_IMAGE
) -> list[Task]:
    """Fill `task.image` for tasks that have none, building (or reusing) one content-hashed
    image per distinct source dir. Tasks that already name an image keep it. Returns `tasks`,
    changed in place."""
    import docker.errors

    built: dict[tuple[Path, bytes, str, str], str] = {}
    for task in tasks:
        if task.image:
            continue
        try:
            task.image = _task_image(task, tasks_file, base_image, built)
        except docker.errors.BuildError as e:  # e.g. a source_patch that does not apply
            raise TaskFileError(
                f"{tasks_file}: instance_id={task.instance_id!r}: its image could not be "
                f"built: {_build_log_tail(e) or e}"
            ) from e
    return tasks


def _task_image(
    task: Task, tasks_file: str | Path, base_image: str, built: dict[tuple, str]
) -> str:
    """The task's image, built from its recipe or from its source dir (+ source patch; one
    image per distinct source, kept in `built`)."""
    if not task.source_dir and recipe_of(task):
        from swefleet.envs.synth.build import ensure_recipe_task_image

        return ensure_recipe_task_image(task, tasks_file, base_image)
    source = resolve_source_dir(task, tasks_file)
    patch = source_patch_of(task, tasks_file)
    key = (source, patch, task.repo, task.workdir)
    if key not in built:
        built[key] = ensure_task_image(task, source, base_image, patch)
    return built[key]


#: Lines of a build log that Docker itself writes (not the failing step's output).
_DOCKER = ("Step ", " ---> ", "--->", "Removing intermediate", "The command '")


def _build_log_tail(error: Exception, lines: int = 4) -> str:
    """The last lines a failed `docker build` step printed (what went wrong, e.g. `git
    apply`'s error), on one line, without colours and Docker's own step lines."""
    text = "".join(
        str(chunk.get("stream") or "")
        for chunk in getattr(error, "build_log", None) or ()
        if isinstance(chunk, dict)
    )
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    kept = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith(_DOCKER)]
    return " | ".join(kept[-lines:])

