"""Every command's output folder explains itself: index.md is titled by the command, describes
every file the command (and replay, export) writes there, and a demo's starts with its summary
and its stages in the order they ran."""

import json
import re

import pytest
from swefleet.evals.run_index import INDEX, UNKNOWN, index_markdown
from swefleet.evals.run_report import run_kind, write_run_report

from tests.unit.evals_bench_fixture import write_run
from tests.unit.run_folder_fixture import write_everything

pytestmark = pytest.mark.unit


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    """A finished demo with every optional file, its report written (read only)."""
    folder = write_everything(tmp_path_factory.mktemp("reported") / "demo", "demo")
    write_run_report(folder)
    return folder


def _rows(folder) -> list[tuple[str, str]]:
    """(file, description) of the index's table, in its order."""
    return re.findall(r"^\| `([^`]+)` \| (.*) \|$", (folder / INDEX).read_text(), re.MULTILINE)


def _entries(folder) -> set[str]:
    return {p.name + ("/" if p.is_dir() else "") for p in folder.iterdir() if p.name != INDEX}


def _explains_itself(folder, title: str) -> None:
    text = (folder / INDEX).read_text()
    assert text.startswith(f"# {title}\n"), text[:80]
    rows = dict(_rows(folder))
    assert set(rows) == _entries(folder)
    assert [name for name, about in rows.items() if about == UNKNOWN] == []


@pytest.mark.parametrize(("kind", "title"), [
    ("rl", "swefleet rl run folder"), ("sft", "swefleet sft run folder"),
    ("eval", "swefleet eval run folder"), ("demo", "swefleet demo run folder")])
def test_every_file_a_command_writes_is_described_under_its_title(tmp_path, demo, kind, title):
    folder = demo if kind == "demo" else write_everything(tmp_path / kind, kind)
    assert run_kind(folder) == kind
    if kind != "demo":
        write_run_report(folder)
    _explains_itself(folder, title)
    rows = dict(_rows(folder))
    if kind in ("rl", "demo", "eval"):  # written by `swefleet replay` into the folder replayed
        assert "swefleet replay --check" in rows["replay_check.json"]
        assert "swefleet replay" in rows["replays/"]


def test_a_users_own_file_is_the_only_unknown_entry(tmp_path):
    folder = write_everything(tmp_path / "rl", "rl")
    (folder / "notes.txt").write_text("mine")
    text = index_markdown(folder, "rl", [])
    assert re.findall(rf"^\| `([^`]+)` \| {UNKNOWN} \|$", text, re.MULTILINE) == ["notes.txt"]


def test_a_demo_index_starts_with_the_summary_then_the_stages_in_the_order_they_ran(demo):
    text = (demo / INDEX).read_text()
    stages = re.findall(r"^\d+\. (.*)$", text, re.MULTILINE)
    assert [s.split(":")[0] for s in stages] == [
        "[`eval-heldout-base/`](eval-heldout-base/index.md)", "[`sft/`](sft/index.md)",
        "[`eval-heldout-sft/`](eval-heldout-sft/index.md)", "this folder",
        "[`eval-heldout/`](eval-heldout/index.md)"]
    assert "starting model" in stages[0] and "final RL checkpoint" in stages[4]
    assert text.index("demo_summary.md") < text.index("## Stages")
    first = [name for name, _ in _rows(demo)][:8]
    assert first == ["demo_summary.md", "demo_summary.json", "demo_times.json",
                     "eval-heldout-base/", "sft/", "eval-heldout-sft/", "eval-heldout/",
                     "batches/"]
    assert dict(_rows(demo))["demo_summary.md"].startswith("start here")


def test_every_stage_of_a_demo_is_redrawn_and_points_back_to_the_summary(demo):
    for stage, n, title in (("eval-heldout-base", 1, "eval"), ("sft", 2, "sft"),
                            ("eval-heldout-sft", 3, "eval"), ("eval-heldout", 5, "eval")):
        png = "loss.png" if stage == "sft" else "success_by_task.png"
        assert (demo / stage / png).read_bytes()[:4] == b"\x89PNG"
        _explains_itself(demo / stage, f"swefleet {title} run folder")
        text = (demo / stage / INDEX).read_text()
        assert f"Stage {n} of 5 (" in text and "(../demo_summary.md)" in text


def test_a_demo_without_a_config_finds_its_stages_by_their_names(tmp_path):
    demo = write_everything(tmp_path / "demo", "demo")
    config = json.loads((demo / "config.json").read_text())
    config.pop("final_eval")
    (demo / "config.json").write_text(json.dumps(config))
    (demo / "demo_summary.md").unlink()
    text = index_markdown(demo, "demo", [])
    order = [text.index(f"[`{n}`]") for n in
             ("eval-heldout-base/", "sft/", "eval-heldout-sft/", "eval-heldout/")]
    assert order == sorted(order)
    assert "`demo_summary.md` is written when the last stage has finished" in text


def test_a_bench_folder_and_its_runs_explain_themselves(tmp_path):
    bench = tmp_path / "bench"
    write_run(bench / "run-0", [3.0, 2.0, 2.0], steps=3)
    write_run(bench / "run-1.incomplete-20261203-120000", [3.0])
    (bench / "bench_env.json").write_text(json.dumps({"steps": 3, "runs": 1}))
    (bench / "run-0.log").write_text("")
    assert run_kind(bench) == "bench"
    plots = write_run_report(bench)
    assert {"step_time.png", "run-0/step_time.png"} <= {p.name for p in plots if p.written}
    _explains_itself(bench, "swefleet bench folder")
    rows = dict(_rows(bench))
    assert "incomplete" in rows["run-1.incomplete-20261203-120000/"]
    assert [name for name, _ in _rows(bench)][:2] == ["bench.md", "bench.json"]
    _explains_itself(bench / "run-0", "swefleet rl run folder")
    assert "(../bench.md)" in (bench / "run-0" / INDEX).read_text()


def test_report_bench_of_one_run_folder_keeps_that_runs_index(tmp_path):
    from swefleet.evals.bench_outputs import write_bench_outputs

    run = write_run(tmp_path / "rl", [3.0, 2.0, 2.0], steps=3)
    (run / INDEX).write_text("the run's own index\n")
    write_bench_outputs(run, plots=False)
    assert (run / INDEX).read_text() == "the run's own index\n"
    assert run_kind(run) == "rl"
    text = index_markdown(run, "rl", [])
    assert "bench.json` | `swefleet report bench` of this run alone" in text
    assert UNKNOWN not in text
