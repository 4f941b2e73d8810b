"""`swefleet report compare`: deltas recomputed from raw samples, and the noise verdicts."""

import argparse
import json

import pytest
from swefleet.evals.bench_data import find_run_dirs, load_run
from swefleet.evals.bench_report import build_bench_report
from swefleet.evals.compare import compare_markdown, compare_reports, steady_samples
from swefleet.evals.report import build_report
from swefleet.evals.stats import bootstrap_task_delta_ci

from swefleet.app.report import report_compare_cli
from tests.unit.evals_bench_fixture import write_bench

pytestmark = pytest.mark.unit


def _bench(root, **kw) -> dict:
    return build_bench_report([load_run(p) for p in find_run_dirs(write_bench(root, **kw))])


def _rows(result: dict) -> dict:
    return {r["metric"]: r for r in result["rows"]}


def _eval(outcomes: dict[str, list[bool | None]]) -> dict:
    records = [{"task_id": t, "attempt": i, "resolved": o, "tokens": 10, "wall_s": 1.0}
               for t, outs in outcomes.items() for i, o in enumerate(outs)]
    return build_report(records, k=max(len(o) for o in outcomes.values()))


def test_bench_doubling_is_beyond_noise_and_config_change_listed(tmp_path):
    a = _bench(tmp_path / "a")
    b = _bench(tmp_path / "b", scale=2.0, groups_per_step=4)
    result = compare_reports(a, b, n_boot=400)
    rows = _rows(result)
    med = rows["step_time_median_s"]
    assert (med["a"], med["b"], med["delta"]) == (2.5, 5.0, 2.5)  # hand: medians 2.5 and 5
    assert med["rel_delta"] == pytest.approx(1.0)
    assert med["beyond_noise"] is True and med["ci95"][0] > 0
    assert rows["step_time_cv"]["delta"] == pytest.approx(0.0, abs=1e-12)  # CV is scale-free
    assert rows["step_time_cv"]["beyond_noise"] is False
    # wait_for_data = time - 1: steady medians 1.5 -> 4.0
    assert rows["phase_wait_for_data_median_s"]["delta"] == pytest.approx(2.5)
    assert rows["phase_train_median_s"]["delta"] == 0.0
    assert rows["phase_train_median_s"]["beyond_noise"] is False
    assert rows["warmup_steps"]["ci95"] is None and rows["warmup_steps"]["beyond_noise"] is None
    assert result["config_changes"] == {"orchestrator.groups_per_step": [2, 4]}
    moved = result["moved_phase"]  # wait_for_data moved 2.5 s of the step median's 2.5 s
    assert (moved["phase"], moved["delta_s"], moved["share_of_step_delta"]) == (
        "phase_wait_for_data_median_s", pytest.approx(2.5), pytest.approx(1.0))
    assert "The phase that moved most: **phase_wait_for_data_median_s**" in compare_markdown(
        result)


def test_bench_same_runs_are_within_noise(tmp_path):
    a = _bench(tmp_path / "a")
    rows = _rows(compare_reports(a, a, n_boot=400))
    for metric in ("step_time_median_s", "step_time_p90_s", "step_time_mean_s", "step_time_cv"):
        assert rows[metric]["delta"] == 0.0
        assert rows[metric]["beyond_noise"] is False, metric


def test_bench_values_come_from_steady_rows_not_headline(tmp_path):
    a = _bench(tmp_path / "a")
    tampered = json.loads(json.dumps(a))
    tampered["step_time_median_s"] = 99.0  # a headline edited by hand is ignored
    assert _rows(compare_reports(tampered, a, n_boot=100))["step_time_median_s"]["a"] == 2.5
    assert steady_samples(a, "time_s")[0] == [2, 2.25, 1.75, 2]


def test_eval_paired_success_rate_delta():
    a = _eval({f"t{i}": [False, False] for i in range(20)})
    b = _eval({f"t{i}": [True, i % 2 == 0] for i in range(20)})
    rows = _rows(compare_reports(a, b, n_boot=500))
    sr = rows["success_rate"]
    assert (sr["a"], sr["b"]) == (0.0, pytest.approx(0.75))  # b: 10 tasks 1.0, 10 tasks 0.5
    assert sr["beyond_noise"] is True and "paired" in sr["note"]
    assert rows["pass@2"]["b"] == pytest.approx(1.0) and rows["pass^2"]["b"] == pytest.approx(0.5)
    assert rows["flip_rate"]["delta"] == pytest.approx(0.5) and rows["flip_rate"]["ci95"] is None


def test_eval_small_difference_is_within_noise_and_unpaired_when_tasks_differ():
    a = _eval({f"t{i}": [i % 2 == 0] for i in range(8)})
    b = _eval({f"t{i}": [i % 2 == 0 or i == 1] for i in range(8)})
    sr = _rows(compare_reports(a, b, n_boot=500))["success_rate"]
    assert sr["delta"] == pytest.approx(0.125) and sr["beyond_noise"] is False
    c = _eval({"t0": [True], "y": [False]})
    assert "unpaired" in _rows(compare_reports(a, c, n_boot=100))["success_rate"]["note"]


def test_paired_task_bootstrap_hand_case():
    # every task improves by exactly 0.5: all resamples give 0.5
    (lo, hi), paired = bootstrap_task_delta_ci({"a": 0.0, "b": 0.5}, {"a": 0.5, "b": 1.0})
    assert paired and lo == hi == pytest.approx(0.5)


def test_mixed_schemas_are_refused(tmp_path):
    with pytest.raises(ValueError, match="cannot compare"):
        compare_reports(_bench(tmp_path / "a"), _eval({"a": [True]}))


def test_compare_markdown_and_cli(tmp_path, capsys):
    a, b = _bench(tmp_path / "a"), _bench(tmp_path / "b", scale=2.0)
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps(a))
    pb.write_text(json.dumps(b))
    out = tmp_path / "cmp.json"
    args = argparse.Namespace(a=str(pa), b=str(pb), json=str(out), n_boot=200, seed=0)
    assert report_compare_cli(args) == 0
    text = capsys.readouterr().out
    assert "| step_time_median_s | 2.5 | 5 | 2.5 | +100.0% |" in text
    assert "**beyond noise**" in text and "not tested" in text
    assert json.loads(out.read_text())["schema"] == "swefleet.compare/1"
    assert "config changes" not in compare_markdown(compare_reports(a, a, n_boot=50))


def test_a_single_sample_is_never_beyond_noise(tmp_path):
    """One task (or one steady step) per side: a bootstrap of one value has no spread, so its
    CI is the point delta itself and would call any change significant."""
    sr = _rows(compare_reports(_eval({"a": [False]}), _eval({"a": [True]}), n_boot=100))
    assert sr["success_rate"]["delta"] == 1.0 and sr["success_rate"]["ci95"] is None
    assert sr["success_rate"]["p_value"] == 1.0  # one discordant pair: McNemar's p is 1
    assert sr["success_rate"]["beyond_noise"] is None
    assert sr["success_rate"]["no_verdict"] == "too few shared tasks (n=1) for a verdict"
    from tests.unit.evals_bench_fixture import write_run

    one = [build_bench_report([load_run(write_run(tmp_path / n, [5, t], steps=2))])
           for n, t in (("a", 2.0), ("b", 2.5))]  # step 0 is warm-up: one steady step each
    med = _rows(compare_reports(*one, n_boot=100))["step_time_median_s"]
    assert med["delta"] == 0.5 and med["beyond_noise"] is None and med["ci95"] is None


def test_exact_tests_match_textbook_values():
    from swefleet.evals.exact_tests import fisher_exact_p, mcnemar_exact_p

    assert fisher_exact_p(3, 4, 1, 4) == pytest.approx(17 / 35)  # Fisher's lady tasting tea
    assert fisher_exact_p(8, 10, 1, 6) == pytest.approx(0.034965034965)  # scipy's docs example
    assert fisher_exact_p(1, 10, 11, 14) == pytest.approx(0.0027594562)  # Wikipedia's dieting
    assert fisher_exact_p(0, 3, 2, 2) == pytest.approx(0.1)  # 1 table in 10 is as extreme
    assert fisher_exact_p(2, 5, 2, 5) == 1.0
    assert mcnemar_exact_p(0, 6) == pytest.approx(2 / 64)  # binomial(6, 1/2) tails
    assert mcnemar_exact_p(1, 5) == pytest.approx(2 * 7 / 64)
    assert mcnemar_exact_p(2, 10) == pytest.approx(2 * 79 / 4096)
    assert mcnemar_exact_p(3, 3) == mcnemar_exact_p(0, 0) == 1.0
    with pytest.raises(ValueError):
        fisher_exact_p(4, 3, 0, 1)


def test_eval_few_attempts_unpaired_fisher_give_no_verdict():
    """0/3 vs 2/2 looks like a jump from 0% to 100%; Fisher's exact test says p = 0.1, and no
    outcome on 3 vs 2 attempts could go below 0.1: too few for a verdict."""
    a = _eval({"a": [False], "b": [False], "c": [False]})
    b = _eval({"a": [True], "y": [True]})
    result = compare_reports(a, b, n_boot=200)
    sr = _rows(result)["success_rate"]
    assert sr["p_value"] == pytest.approx(0.1) and sr["beyond_noise"] is None
    assert sr["test"].startswith("unpaired: Fisher")
    assert _rows(result)["pass@1"]["beyond_noise"] is None  # no exact test unpaired: no verdict
    assert ("| 0.1 | too few scored attempts (n=3 vs 2) for a verdict | unpaired: Fisher exact"
            in compare_markdown(result))
    many_a = _eval({f"t{i}": [False] for i in range(6)})
    many_b = _eval({f"t{i}": [True] for i in range(1, 7)})  # 5 shared, 0/6 vs 6/6
    sr = _rows(compare_reports(many_a, many_b, n_boot=200))["success_rate"]
    assert sr["test"].startswith("unpaired: Fisher") and sr["p_value"] == pytest.approx(2 / 924)
    assert sr["beyond_noise"] is True and sr["no_verdict"] is None


def test_eval_paired_mcnemar_ignores_a_collapsed_bootstrap():
    """Same 3 tasks, all failed then all resolved: every bootstrap resample gives delta 1 (a
    zero-width CI, not shown), and 3 discordant pairs give McNemar p = 2/8 at best: no
    verdict. 8 tasks the same way give p = 2/256: distinguishable, the CI still not shown."""
    a = _eval({"a": [False], "b": [False], "c": [False]})
    b = _eval({"a": [True], "b": [True], "c": [True]})
    rows = _rows(compare_reports(a, b, n_boot=200))
    assert rows["success_rate"]["ci95"] is None and "zero width" in rows["success_rate"]["note"]
    assert rows["success_rate"]["p_value"] == pytest.approx(0.25)
    assert rows["success_rate"]["beyond_noise"] is None
    assert rows["pass@1"]["test"] == "paired: sign test over tasks"
    big_a = _eval({f"t{i}": [False] for i in range(8)})
    big_b = _eval({f"t{i}": [True] for i in range(8)})
    sr = _rows(compare_reports(big_a, big_b, n_boot=200))["success_rate"]
    assert sr["p_value"] == pytest.approx(2 / 256) and sr["beyond_noise"] is True
    assert sr["ci95"] is None


def test_pairing_needs_the_same_task_attempts_in_attempt_order():
    from swefleet.evals.compare import paired_attempts

    records = [{"task_id": "a", "attempt": 1, "resolved": True},  # finished first
               {"task_id": "a", "attempt": 0, "resolved": False}]
    assert build_report(records, k=2)["per_task"] == {"a": [False, True]}
    assert paired_attempts({"a": [False, True]}, {"a": [True, True]}) == [
        (False, True), (True, True)]
    assert paired_attempts({"a": [False, True]}, {"a": [True]}) is None  # an infra error
    assert paired_attempts({"a": [True]}, {"b": [True]}) is None


def _write_evals(tmp_path, a: dict, b: dict) -> argparse.Namespace:
    pa, pb = tmp_path / "a.json", tmp_path / "b.json"
    pa.write_text(json.dumps(_eval(a)))
    pb.write_text(json.dumps(_eval(b)))
    return argparse.Namespace(a=str(pa), b=str(pb), json=None, n_boot=200, seed=0)


def test_evals_without_a_shared_task_are_refused(tmp_path, capsys):
    args = _write_evals(tmp_path, {f"a{i}": [True] for i in range(9)},
                        {f"b{i}": [False] for i in range(9)})  # Fisher alone: p = 4e-05
    with pytest.raises(ValueError, match="^no shared tasks: .*no paired test possible") as e:
        report_compare_cli(args)
    assert "\n" not in str(e.value)
    assert "distinguishable" not in capsys.readouterr().out


def test_two_task_oracle_vs_empty_gives_no_verdict_nor_interval(tmp_path, capsys):
    """Oracle resolves both tasks, an empty patch neither: every bootstrap resample gives -1
    ([-1, -1]) and no outcome on 2 pairs could reach p < 0.05."""
    args = _write_evals(tmp_path, {"a": [True], "b": [True]}, {"a": [False], "b": [False]})
    assert report_compare_cli(args) == 0
    text = capsys.readouterr().out
    assert "distinguishable" not in text and "[-1, -1]" not in text
    line = next(x for x in text.splitlines() if x.startswith("| success_rate "))
    assert "| too few shared tasks (n=2) for a verdict |" in line
    assert [c.strip() for c in line.split("|")][6] == "–"  # the CI cell


def test_enough_shared_tasks_still_give_a_verdict(tmp_path, capsys):
    args = _write_evals(tmp_path, {f"t{i}": [True] for i in range(9)},
                        {f"t{i}": [i % 3 == 0] for i in range(9)})  # 6 of 9 lost: p = 2/64
    assert report_compare_cli(args) == 0
    line = next(x for x in capsys.readouterr().out.splitlines()
                if x.startswith("| success_rate "))
    assert "| 0.0312 | **distinguishable** |" in line
    ci = [c.strip() for c in line.split("|")][6]
    lo, hi = (float(x) for x in ci.strip("[]").split(","))
    assert lo < hi < 0


def test_compare_takes_eval_folders_and_refuses_one_without_a_report(tmp_path, capsys):
    for name, outcomes in (("a", [True, False]), ("b", [True, True])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "report.json").write_text(json.dumps(_eval({"t1": outcomes})))
    args = argparse.Namespace(a=str(tmp_path / "a"), b=str(tmp_path / "b"), json=None,
                              n_boot=50, seed=0)
    assert report_compare_cli(args) == 0
    assert "| success_rate | 0.5 | 1 |" in capsys.readouterr().out
    (tmp_path / "empty").mkdir()
    args.b = str(tmp_path / "empty")
    with pytest.raises(ValueError, match="neither report.json nor bench.json"):
        report_compare_cli(args)
