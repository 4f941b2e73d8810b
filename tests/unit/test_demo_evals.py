"""The demo's evals: which stages a config runs, the paired tests between the evals, their rows
in the summary, and stage times that survive a resume."""

import json

import pytest
from swefleet.evals.exact_tests import mcnemar_exact_p
from swefleet.evals.report import build_report

from swefleet.app.config import load_config
from swefleet.app.demo import _Stages, demo_stages, demo_summary, summary_rows
from swefleet.app.demo_evals import eval_dir, paired_tests, stage_reports

pytestmark = pytest.mark.unit


def _report(outcomes: dict[str, list[bool]]) -> dict:
    records = [{"task_id": t, "attempt": i, "resolved": o, "tokens": 10, "wall_s": 1.0}
               for t, outs in outcomes.items() for i, o in enumerate(outs)]
    return build_report(records, k=max(len(o) for o in outcomes.values()))


def _cfg(*sets: str):
    return load_config("", ["final_eval.split=\"heldout\"", "final_eval.k=2", *sets])


def test_stages_follow_the_config():
    assert demo_stages(_cfg()) == ["rl", "eval"]
    assert demo_stages(_cfg("final_eval.base=true", "final_eval.after_sft=true")) == [
        "eval_base", "rl", "eval"]  # no SFT: no SFT eval
    assert demo_stages(_cfg("final_eval.base=true", "final_eval.after_sft=true",
                            "sft.steps=5")) == ["eval_base", "sft", "eval_sft", "rl", "eval"]
    assert demo_stages(load_config("", ["sft.steps=5"])) == ["sft", "rl"]


def test_paired_tests_are_mcnemar_on_the_same_attempts(tmp_path):
    cfg = _cfg()
    base = {"a": [False, False], "b": [False, False], "c": [False, True], "d": [False, False]}
    sft = {"a": [True, False], "b": [True, True], "c": [False, True], "d": [False, False]}
    rl = {"a": [True, True], "b": [True, True], "c": [True, True], "d": [True, False]}
    for stage, outcomes in (("base", base), ("sft", sft), ("rl", rl)):
        folder = eval_dir(cfg, tmp_path, stage)
        folder.mkdir(parents=True)
        (folder / "report.json").write_text(json.dumps(_report(outcomes)))
    tests = {(t["a"], t["b"]): t for t in paired_tests(stage_reports(cfg, tmp_path))}
    assert list(tests) == [("base", "sft"), ("sft", "rl"), ("base", "rl")]
    t = tests[("base", "sft")]
    assert (t["a_rate"], t["b_rate"]) == (1 / 8, 4 / 8)
    assert "McNemar" in t["test"] and t["p"] == pytest.approx(mcnemar_exact_p(0, 3))
    assert tests[("base", "rl")]["p"] == pytest.approx(mcnemar_exact_p(0, 6))
    assert tests[("base", "rl")]["distinguishable"] is True  # p = 2/64
    assert tests[("base", "sft")]["distinguishable"] is False  # p = 0.25
    summary = demo_summary(cfg, tmp_path, {"eval_base": 3.0, "rl": 9.0, "eval": 4.0})
    rows = summary_rows(summary)
    assert rows[0][0] == "eval base (heldout)" and rows[0][2] == "3"
    assert [r[0] for r in rows[-3:]] == ["base vs sft", "sft vs rl", "base vs rl"]
    assert "0.125 -> 0.500 (+0.375)" in rows[-3][1]


def test_stage_times_survive_a_resume(tmp_path):
    import io

    from rich.console import Console

    console = Console(file=io.StringIO())
    stages = _Stages(tmp_path, ["eval_base", "rl"], console)
    assert stages.start("eval_base", "base", done=False)
    assert stages.timed(lambda x: x + 1, 1) == 2
    resumed = _Stages(tmp_path, ["eval_base", "rl"], console)
    assert not resumed.start("eval_base", "base", done=True)  # done: not run again
    assert set(resumed.times) == {"eval_base"}


def test_a_pair_too_small_for_a_verdict_says_so(tmp_path):
    cfg = _cfg()
    for stage, outcomes in (("base", {"a": [False], "b": [False]}),
                            ("rl", {"a": [True], "b": [True]})):
        folder = eval_dir(cfg, tmp_path, stage)
        folder.mkdir(parents=True)
        (folder / "report.json").write_text(json.dumps(_report(outcomes)))
    (row,) = summary_rows(demo_summary(cfg, tmp_path, {}))[-1:]
    assert row[0] == "base vs rl" and "too few shared" in row[1] and "for a verdict" in row[1]
