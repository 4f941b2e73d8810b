import pytest
from swefleet.evals.report import build_report, report_markdown
from swefleet.evals.stats import (
    bootstrap_ci,
    flip_rate,
    pass_at_k,
    pass_hat_k,
    success_rate,
    success_rate_ci,
    wilson_interval,
)

pytestmark = pytest.mark.unit


def test_pass_at_k_hand_values():
    # n=5 attempts, c=2 successes: pass@1 = 2/5; pass@2 = 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
    assert pass_at_k(5, 0, 3) == 0.0
    assert pass_at_k(5, 3, 3) == 1.0  # n - c = 2 < k
    with pytest.raises(ValueError):
        pass_at_k(2, 1, 3)


def test_pass_hat_k_hand_values():
    assert pass_hat_k(5, 2, 2) == pytest.approx(1 / 10)
    assert pass_hat_k(4, 4, 3) == 1.0


def test_success_rate_weighs_tasks_equally_and_flip_rate():
    outcomes = {"a": [True, True, False, False], "b": [True], "c": [False, False]}
    assert success_rate(outcomes) == pytest.approx((0.5 + 1 + 0) / 3)
    assert flip_rate(outcomes) == pytest.approx(1 / 2)  # a flips, c does not; b has 1 attempt


def test_bootstrap_ci_degenerate_and_ordered():
    assert bootstrap_ci({"a": [True], "b": [True]}) == (1.0, 1.0)
    assert bootstrap_ci({"a": [False], "b": [False]}) == (0.0, 0.0)
    lo, hi = bootstrap_ci({str(i): [i % 2 == 0] for i in range(40)})
    assert 0.2 < lo < 0.5 < hi < 0.8


def test_report_recomputed_from_records_with_infra_excluded():
    records = [
        {"task_id": "a", "attempt": 0, "resolved": True, "tokens": 10, "wall_s": 1.0},
        {"task_id": "a", "attempt": 1, "resolved": False, "tokens": 20, "wall_s": 3.0},
        {"task_id": "b", "attempt": 0, "resolved": None, "tokens": 0, "wall_s": 2.0},
        {"task_id": "b", "attempt": 1, "resolved": False, "tokens": 30, "wall_s": 2.0},
    ]
    r = build_report(records, k=2)
    assert r["n_tasks"] == 2 and r["n_episodes"] == 4 and r["infra_errors"] == 1
    assert r["success_rate"] == pytest.approx((0.5 + 0.0) / 2)
    assert r["success_rate_infra_as_failure"] == pytest.approx((0.5 + 0.0) / 2)
    assert r["pass_at_k"]["1"] == pytest.approx((0.5 + 0.0) / 2)
    assert r["pass_at_k"]["2"] == pytest.approx(1.0)  # only task a has 2 scored attempts
    assert r["tokens_mean"] == pytest.approx(15.0)


def test_wilson_interval_reference_values():
    # published 95% Wilson score intervals (e.g. statsmodels proportion_confint method="wilson")
    assert wilson_interval(0.0, 10) == (0.0, pytest.approx(0.277533, abs=1e-6))
    assert wilson_interval(1.0, 10) == (pytest.approx(0.722467, abs=1e-6), 1.0)
    assert wilson_interval(0.5, 10) == pytest.approx((0.236593, 0.763407), abs=1e-6)
    assert wilson_interval(1.0, 1) == (pytest.approx(0.206549, abs=1e-6), 1.0)  # 1 / (1 + z^2)
    assert wilson_interval(0.0, 0) == (0.0, 1.0)


def test_success_rate_ci_never_collapses_to_a_point():
    """All tasks failed (or passed), or a single task: the bootstrap alone gives [p, p]."""
    assert success_rate_ci({t: [False] for t in "abc"}) == (0.0, pytest.approx(0.561497, abs=1e-6))
    assert success_rate_ci({t: [True] for t in "abc"}) == (pytest.approx(0.438503, abs=1e-6), 1.0)
    lo, hi = success_rate_ci({"a": [True, False]})  # one task: nothing known about the others
    assert lo < 0.5 < hi and hi - lo > 0.5
    assert success_rate_ci({}) == (0.0, 1.0) == success_rate_ci({"a": []})  # nothing scored
    lo, hi = success_rate_ci({str(i): [i % 2 == 0] for i in range(40)})
    b_lo, b_hi = bootstrap_ci({str(i): [i % 2 == 0] for i in range(40)})
    assert lo <= b_lo and hi >= b_hi and 0.3 < lo < 0.5 < hi < 0.7


def test_report_ci_and_pass_at_k_without_enough_attempts():
    records = [{"task_id": t, "attempt": 0, "resolved": True, "tokens": 1, "wall_s": 1.0}
               for t in "ab"]
    records += [{"task_id": t, "attempt": 1, "resolved": None, "tokens": 1, "wall_s": 1.0}
                for t in "ab"]  # the second attempt of every task was an infra error
    r = build_report(records, k=2)
    assert r["ci95"] == [pytest.approx(2 / (2 + 1.959964**2)), 1.0]  # Wilson, 2 of 2
    assert r["pass_at_k"] == {"1": 1.0, "2": None}  # no task has 2 scored attempts: not 0.0
    assert r["pass_hat_k"]["2"] is None
    assert "k=2: n/a" in report_markdown(r)


def test_each_split_is_reported_on_its_own():
    from swefleet.evals.report import build_report, report_markdown, split_fields

    records = [{"task_id": t, "attempt": a, "resolved": r} for t, a, r in [
        ("a", 0, True), ("a", 1, True), ("b", 0, False), ("b", 1, None),
        ("c", 0, False), ("c", 1, False)]]
    split_of = {"a": "train", "b": "heldout_repo", "c": "heldout_repo"}
    fields = split_fields(records, split_of, 2)
    assert fields["per_split"]["train"]["success_rate"] == 1.0
    held = fields["per_split"]["heldout_repo"]
    assert (held["success_rate"], held["n_tasks"], held["n_episodes"], held["infra_errors"]) \
        == (0.0, 2, 4, 1)
    assert split_fields(records, dict.fromkeys("abc", "train"), 2) == {}  # one split: none
    text = report_markdown(build_report(records, 2) | fields)
    assert "- split heldout_repo: **0.0%**" in text and "- split train: **100.0%**" in text
