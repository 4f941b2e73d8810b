"""Task loading: formats, validation errors that say where, source dirs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from swefleet.envs import tasks as tasks_mod
from swefleet.envs.tasks import TaskFileError, load_tasks, resolve_source_dir, source_patch_of

pytestmark = pytest.mark.unit

QUICKSTART = Path(__file__).resolve().parents[2] / "envs" / "data" / "quickstart" / "tasks.jsonl"


def record(i: int = 1, **fields) -> dict:
    base = {
        "instance_id": f"demo__demo-{i}",
        "repo": "demo/demo",
        "problem_statement": "it is broken",
        "image": "demo:latest",
    }
    return {**base, **fields}


def write_jsonl(path: Path, records: list) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_quickstart_set_loads_and_splits():
    tasks = load_tasks(QUICKSTART)
    assert len(tasks) >= 4
    assert {t.split for t in tasks} == {"train", "heldout"}
    train = load_tasks(QUICKSTART, split="train")
    heldout = load_tasks(QUICKSTART, split="heldout")
    assert len(train) + len(heldout) == len(tasks)
    assert all(t.split == "train" for t in train)
    for t in tasks:
        assert t.FAIL_TO_PASS and t.PASS_TO_PASS and t.patch and t.test_patch
        assert resolve_source_dir(t, QUICKSTART).is_dir()
        assert source_patch_of(t, QUICKSTART).startswith(b"diff --git ")
        for test_id in t.FAIL_TO_PASS + t.PASS_TO_PASS:  # whole ids, not cut at a space
            assert test_id.startswith("tests/test_") and test_id.count("[") == test_id.count("]")
        assert isinstance(t.created_at, str) and t.created_at.endswith("Z")


def test_split_takes_a_comma_separated_list(tmp_path):
    from swefleet.envs.tasks import split_label

    path = write_jsonl(tmp_path / "t.jsonl", [
        record(1, split="train"), record(2, split="heldout"), record(3, split="heldout_instance")])
    ids = lambda split: [t.instance_id for t in load_tasks(path, split=split)]
    assert ids("heldout") == ["demo__demo-2"]  # a name selects only itself
    assert ids("heldout_instance, heldout") == ["demo__demo-2", "demo__demo-3"]
    assert ids(None) == ["demo__demo-1", "demo__demo-2", "demo__demo-3"]
    assert split_label("heldout_instance,heldout") == "heldout+heldout_instance"
    assert split_label("heldout") == "heldout"
    with pytest.raises(TaskFileError, match="empty name"):
        load_tasks(path, split="heldout,")


def test_jsonl_json_and_parquet_agree(tmp_path):
    import pandas as pd

    records = [
        record(1, FAIL_TO_PASS=["t::a"], created_at="2024-01-02T03:04:05Z"),
        record(2, PASS_TO_PASS=["t::b"], hints_text="h"),
    ]
    jsonl = write_jsonl(tmp_path / "t.jsonl", records)
    js = tmp_path / "t.json"
    js.write_text(json.dumps(records))
    parquet = tmp_path / "t.parquet"
    pd.DataFrame(records).to_parquet(parquet)  # (Dataset.from_list keeps only row 0's keys)
    loaded = [load_tasks(p) for p in (jsonl, js, parquet)]
    assert loaded[0] == loaded[1] == loaded[2]
    first, second = loaded[0]
    assert first.FAIL_TO_PASS == ["t::a"] and first.PASS_TO_PASS == []
    assert first.created_at == "2024-01-02T03:04:05Z"
    assert second.hints_text == "h" and second.test_cmd.startswith("python3 -m pytest")


def test_json_encoded_test_lists_as_on_the_hub(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [record(1, FAIL_TO_PASS='["a::b", "a::c"]')])
    assert load_tasks(path)[0].FAIL_TO_PASS == ["a::b", "a::c"]


def test_invalid_json_line_names_file_and_record(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(record(1)) + "\n\n{not json\n")
    with pytest.raises(TaskFileError) as e:
        load_tasks(path)
    msg = str(e.value)
    assert str(path) in msg and "record 1" in msg and "line 3" in msg and "invalid JSON" in msg


def test_missing_field_names_file_record_instance_and_field(tmp_path):
    bad = record(2)
    del bad["problem_statement"]
    path = write_jsonl(tmp_path / "t.jsonl", [record(1), bad])
    with pytest.raises(TaskFileError) as e:
        load_tasks(path)
    msg = str(e.value)
    assert str(path) in msg
    assert "record 1" in msg and "demo__demo-2" in msg and "'problem_statement'" in msg


def test_wrong_type_names_the_field_even_when_arrow_cannot_read_the_file(tmp_path):
    # arrow cannot unify a list and an int column: the plain-JSON fallback names the record
    path = write_jsonl(
        tmp_path / "t.jsonl", [record(1, FAIL_TO_PASS=["x"]), record(2, FAIL_TO_PASS=5)]
    )
    with pytest.raises(TaskFileError) as e:
        load_tasks(path)
    msg = str(e.value)
    assert "record 1" in msg and "demo__demo-2" in msg and "'FAIL_TO_PASS'" in msg


def test_non_list_string_for_a_test_list(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [record(1, PASS_TO_PASS="not json")])
    with pytest.raises(TaskFileError, match=r"record 0 .*'PASS_TO_PASS'"):
        load_tasks(path)


def test_record_that_is_not_an_object(tmp_path):
    path = tmp_path / "t.json"
    path.write_text(json.dumps([record(1), ["a", "list"]]))
    with pytest.raises(TaskFileError, match=r"t\.json: record 1"):
        load_tasks(path)


def test_duplicate_instance_id(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [record(1), record(1)])
    with pytest.raises(TaskFileError, match=r"record 1 .*'instance_id': duplicate of record 0"):
        load_tasks(path)


def test_unknown_log_parser(tmp_path):
    path = write_jsonl(tmp_path / "t.jsonl", [record(1, log_parser="nosuchrunner")])
    with pytest.raises(TaskFileError, match=r"record 0 .*'log_parser': unknown log parser"):
        load_tasks(path)


def test_task_without_image_or_source_dir(tmp_path):
    bad = record(1)
    del bad["image"]
    path = write_jsonl(tmp_path / "t.jsonl", [bad])
    with pytest.raises(TaskFileError, match=r"record 0 .*'image'"):
        load_tasks(path)


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_invalid_utf8_is_an_error_naming_the_line_not_replaced(tmp_path, suffix):
    good = json.dumps(record(1)).encode()
    bad = json.dumps(record(2, problem_statement="caf\u00e9")).encode().replace(b"\\u00e9", b"\xe9")
    path = tmp_path / f"t{suffix}"
    if suffix == ".jsonl":
        path.write_bytes(good + b"\n" + bad + b"\n")
    else:
        path.write_bytes(b"[" + good + b",\n" + bad + b"]")
    with pytest.raises(TaskFileError, match=rf"t\{suffix}: line 2: invalid UTF-8 \(byte 0xe9"):
        load_tasks(path)


def test_nested_fields_are_kept_as_written(tmp_path):
    """Per-task sandbox overrides with different keys: arrow turned them into JSON strings
    (and then every sandbox for such a task failed to start)."""
    from swefleet.envs.config import SandboxLimits

    recs = [record(1, sandbox={"memory_mb": 4096}), record(2, sandbox={"cpus": 2.0})]
    tasks = load_tasks(write_jsonl(tmp_path / "t.jsonl", recs))
    assert [t.model_extra for t in tasks] == [{"sandbox": r["sandbox"]} for r in recs]
    limits = [SandboxLimits.for_task(SandboxLimits(), t) for t in tasks]
    assert limits[0].memory_mb == 4096 and limits[1].cpus == 2.0


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_loading_a_local_file_sends_nothing_over_the_network(tmp_path, monkeypatch, suffix):
    """`datasets` pings s3.amazonaws.com (a download counter) unless told not to."""
    import socket

    import pandas as pd

    looked_up = []

    def no_lookup(host, *args, **kwargs):
        looked_up.append(host)
        raise socket.gaierror(socket.EAI_NONAME, "lookups are not allowed in this test")

    path = tmp_path / f"t{suffix}"
    if suffix == ".parquet":
        pd.DataFrame([record(1), record(2)]).to_parquet(path)
    else:
        write_jsonl(path, [record(1), record(2)])
    monkeypatch.setattr(socket, "getaddrinfo", no_lookup)
    assert len(load_tasks(path)) == 2
    assert looked_up == []


@pytest.mark.parametrize(
    ("override", "match"),
    [
        ({"memory_mb": "lots"}, r"field 'sandbox\.memory_mb': Input should be a valid integer"),
        ({"cpus": 0}, r"field 'sandbox\.cpus': Input should be greater than 0"),
        ({"no_such_limit": 1}, r"field 'sandbox\.no_such_limit': Extra inputs"),
        ([1, 2], r"field 'sandbox': must be an object"),
    ],
)
def test_bad_sandbox_override_fails_at_load_time(tmp_path, override, match):
    path = write_jsonl(tmp_path / "t.jsonl", [record(1, sandbox={"memory_mb": 4096}),
                                              record(2, sandbox=override)])
    with pytest.raises(TaskFileError, match=r"record 1 \(instance_id='demo__demo-2'\): " + match):
        load_tasks(path)


@pytest.mark.parametrize("bad_id", ["../../escape", "a/b", "..", "x\u0000y"])
def test_instance_id_that_is_not_a_file_name(tmp_path, bad_id):
    path = write_jsonl(tmp_path / "t.jsonl", [record(1, instance_id=bad_id)])
    with pytest.raises(TaskFileError, match=r"field 'instance_id': must not contain '/'"):
        load_tasks(path)


def test_missing_file_and_unknown_suffix(tmp_path):
    with pytest.raises(TaskFileError, match="no such task file"):
        load_tasks(tmp_path / "nope.jsonl")
    csv = tmp_path / "t.csv"
    csv.write_text("a,b\n")
    with pytest.raises(TaskFileError, match="unknown task file type"):
        load_tasks(csv)


def test_hub_name_goes_to_load_dataset_with_default_split(monkeypatch):
    calls = []

    class FakeDatasets:
        @staticmethod
        def load_dataset(name, split):
            calls.append((name, split))
            raise ConnectionError("offline")

    monkeypatch.setattr(tasks_mod, "_datasets", lambda: FakeDatasets)
    with pytest.raises(TaskFileError, match="princeton-nlp/SWE-bench_Lite.*'test'"):
        load_tasks("princeton-nlp/SWE-bench_Lite")
    with pytest.raises(TaskFileError):
        load_tasks("princeton-nlp/SWE-bench_Lite", split="dev")
    assert calls == [
        ("princeton-nlp/SWE-bench_Lite", "test"),
        ("princeton-nlp/SWE-bench_Lite", "dev"),
    ]


def test_source_dir_is_relative_to_the_task_file(tmp_path):
    (tmp_path / "repos" / "r1").mkdir(parents=True)
    path = write_jsonl(tmp_path / "t.jsonl", [record(1, image="", source_dir="repos/r1")])
    (task,) = load_tasks(path)
    assert resolve_source_dir(task, path) == (tmp_path / "repos" / "r1").resolve()
    task.source_dir = "repos/missing"
    with pytest.raises(TaskFileError, match="demo__demo-1.*'source_dir'"):
        resolve_source_dir(task, path)


def test_prepare_task_images_builds_once_per_source_dir(tmp_path, monkeypatch):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    records = [
        record(1, image="", source_dir="a"),
        record(2, image="", source_dir="a"),
        record(3, image="", source_dir="b"),
        record(4, image="prebuilt:1"),
    ]
    path = write_jsonl(tmp_path / "t.jsonl", records)
    built = []

    def fake_ensure(task, source_dir, base_image, patch=b""):
        built.append((source_dir.name, base_image))
        return f"img-{source_dir.name}"

    monkeypatch.setattr(tasks_mod, "ensure_task_image", fake_ensure)
    tasks = tasks_mod.prepare_task_images(load_tasks(path), path, "base:x")
    assert [t.image for t in tasks] == ["img-a", "img-a", "img-b", "prebuilt:1"]
    assert built == [("a", "base:x"), ("b", "base:x")]


def test_one_shared_repo_and_a_patch_per_task_give_one_image_tag_per_task(tmp_path):
    from swefleet.envs.images import task_image_tag

    tasks = load_tasks(QUICKSTART)
    assert len({resolve_source_dir(t, QUICKSTART) for t in tasks}) == 1
    source = resolve_source_dir(tasks[0], QUICKSTART)
    tags = {task_image_tag(t, source, "base", source_patch_of(t, QUICKSTART)) for t in tasks}
    assert len(tags) == len(tasks)
    t = tasks[0]
    patch = source_patch_of(t, QUICKSTART)
    assert task_image_tag(t, source, "base", patch) != task_image_tag(
        t, source, "base", patch + b"\n"
    )
    assert task_image_tag(t, source, "base") != task_image_tag(t, source, "base", patch)
    missing = t.model_copy(update={"source_patch": "bugs/nope.patch"})
    with pytest.raises(TaskFileError, match="source_patch"):
        source_patch_of(missing, QUICKSTART)


def test_lone_surrogate_escape_is_an_error_naming_the_field(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps(record(1)) + "\n" + json.dumps(record(2, test_patch="a\ud800"))
                    + "\n")
    assert "\\ud800" in path.read_text()  # valid JSON, valid UTF-8: only the escape is bad
    with pytest.raises(TaskFileError, match=r"record 1 .*field 'test_patch': not valid text"):
        load_tasks(path)


@pytest.mark.parametrize(
    ("repo", "slug"),
    [("psf/requests", "psf__requests"), ("Bad Org/x y", "bad-org__x-y"),
     (".hidden/a:b@c", "hidden__a-b-c"), ("x" * 300, "x" * 100)],
)
def test_image_tags_are_valid_docker_references_for_any_repo(tmp_path, repo, slug):
    """Before: `Bad Org/x y` made `swefleet-task:bad org__x y-...` and a Docker traceback."""
    import re

    from swefleet.envs.images import task_image_tag

    from swefleet.types import Task

    task = Task(instance_id="a__b-1", repo=repo, problem_statement="x")
    tag = task_image_tag(task, tmp_path, "base")
    name, _, version = tag.partition(":")
    assert name == "swefleet-task" and version.startswith(slug + "-")
    assert re.fullmatch(r"[a-z0-9_][a-z0-9_.-]{0,127}", version), tag
