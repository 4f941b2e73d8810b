"""`swefleet report compare A.json B.json`: what changed from A to B and whether it is beyond noise.

Values are recomputed from the raw records each report carries (bench: per-step rows of every
run; eval: per-task outcomes). Noise (docs/bench.md):
- bench: 95% CI of stat(B) - stat(A) from a two-level bootstrap (runs, then steps in a run); a
  delta is "beyond noise" when its CI excludes 0;
- eval: exact tests, right for small samples (`evals/exact_tests.py`). success_rate: McNemar's
  exact test on the paired attempts when both reports cover the same task attempts (same tasks,
  same number of scored attempts each), else Fisher's exact test on the success counts;
  pass@k / pass^k: the sign test over tasks when both cover the same tasks, else not tested.
  p < 0.05 is "distinguishable", otherwise "not distinguishable". No verdict when even the most
  lopsided outcome on this many pairs (or attempts) could not reach p < 0.05 ("too few shared
  tasks (n=2) for a verdict"). Two evals with no task in common are refused. The bootstrap CI
  over tasks is shown as the delta's spread, never as the verdict, and not at all when it has
  zero width (every resample alike: all tasks' deltas equal).
Metrics without raw samples, or with a single one on a side, are "not tested".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import NamedTuple

from swefleet.evals.bench_data import PHASES
from swefleet.evals.bench_events import is_steady
from swefleet.evals.bench_report import SCHEMA as BENCH_SCHEMA
from swefleet.evals.bench_report import config_diff
from swefleet.evals.exact_tests import SIGNIFICANCE, fisher_exact_p, mcnemar_exact_p
from swefleet.evals.report import SCHEMA as EVAL_SCHEMA
from swefleet.evals.stats import bootstrap_task_delta_ci, pass_at_k, pass_hat_k
from swefleet.evals.steptime import bootstrap_delta_ci, coef_var, mean

from swefleet.stats import median, percentile

SCHEMA = "swefleet.compare/1"
Stat = Callable[[Sequence[float]], float]
BENCH_STATS: dict[str, tuple[str, Stat]] = {
    "step_time_median_s": ("time_s", median),
    "step_time_p90_s": ("time_s", lambda xs: percentile(xs, 90.0)),
    "step_time_mean_s": ("time_s", mean),
    "step_time_cv": ("time_s", coef_var),
    **{f"phase_{p.removesuffix('_s')}_median_s": (p, median) for p in PHASES},
}


def compare_reports(a: dict, b: dict, *, n_boot: int = 2000, seed: int = 0) -> dict:
    kind = a.get("schema")
    if kind != b.get("schema") or kind not in (BENCH_SCHEMA, EVAL_SCHEMA):
        raise ValueError(f"cannot compare schema {a.get('schema')!r} with {b.get('schema')!r} "
                         f"(both must be {BENCH_SCHEMA} or both {EVAL_SCHEMA})")
    if kind == BENCH_SCHEMA:
        rows = _bench_rows(a, b, n_boot, seed)
        changes = {k: list(v) for k, v in config_diff(a["config"], b["config"]).items()}
        return {"schema": SCHEMA, "compared": kind, "config_changes": changes, "rows": rows,
                "moved_phase": moved_phase(rows)}
    _check_shared_tasks(a["per_task"], b["per_task"])
    rows = _eval_rows(a, b, n_boot, seed)
    return {"schema": SCHEMA, "compared": kind, "config_changes": {}, "rows": rows}


def moved_phase(rows: list[dict]) -> dict | None:
    """Of the phase medians, the one whose change is largest, with its share of the step
    median's change; None when no phase was measured in both."""
    phases = [r for r in rows if r["metric"].startswith("phase_") and r["delta"] is not None]
    step = next((r for r in rows if r["metric"] == "step_time_median_s"), None)
    if not phases:
        return None
    top = max(phases, key=lambda r: abs(r["delta"]))
    step_delta = step["delta"] if step else None
    return {"phase": top["metric"], "delta_s": top["delta"],
            "beyond_noise": top["beyond_noise"], "step_median_delta_s": step_delta,
            "share_of_step_delta": top["delta"] / step_delta if step_delta else None}


def _row(metric: str, va: float | None, vb: float | None,
         ci: tuple[float, float] | None = None, note: str = "",
         test: tuple[str, float] | None = None) -> dict:
    """One compared metric; the verdict is the exact `test`'s (name, p) when given, else the
    CI's."""
    delta = None if va is None or vb is None else vb - va
    if test is not None:
        beyond = test[1] < SIGNIFICANCE
    else:
        beyond = None if ci is None else not (ci[0] <= 0.0 <= ci[1])
    return {
        "metric": metric, "a": va, "b": vb, "delta": delta,
        "rel_delta": delta / va if delta is not None and va else None,
        "ci95": list(ci) if ci else None,
        "test": test[0] if test else None, "p_value": test[1] if test else None,
        "beyond_noise": beyond, "no_verdict": None, "note": note,
    }


class _ExactTest(NamedTuple):
    """An exact test's result and what its sample allows."""

    name: str
    p: float
    best_p: float
    """The smallest p any outcome on this sample could give (all pairs favouring one side)."""
    sample: str
    """The sample, for "too few <sample> for a verdict": `shared tasks (n=2)`."""


def _check_shared_tasks(a: dict[str, list[bool]], b: dict[str, list[bool]]) -> None:
    """Two evals of disjoint task sets measure different things: refuse them."""
    if not a.keys() & b.keys():
        raise ValueError(f"no shared tasks: A covers {len(a)} tasks, B {len(b)} others; "
                         "no paired test possible (compare evals of the same tasks)")


def steady_samples(report: dict, field: str) -> list[list[float]]:
    """Per run, the steady-state values of one per-step column (warm-up and periodic-event rows
    dropped)."""
    w = report["warmup_steps"]
    return [[row[field] for row in run["steps"][w:] if row[field] is not None and is_steady(row)]
            for run in report["runs"]]


def _bench_rows(a: dict, b: dict, n_boot: int, seed: int) -> list[dict]:
    rows = []
    for metric, (field, stat) in BENCH_STATS.items():
        sa, sb = steady_samples(a, field), steady_samples(b, field)
        flat_a, flat_b = [x for r in sa for x in r], [x for r in sb for x in r]
        if not flat_a or not flat_b:
            rows.append(_row(metric, None, None, note="no samples"))
            continue
        note = f"runs {len(sa)} vs {len(sb)}, steps {len(flat_a)} vs {len(flat_b)}"
        ci = (bootstrap_delta_ci(sa, sb, stat, n_boot=n_boot, seed=seed)
              if min(len(flat_a), len(flat_b)) > 1 else None)
        rows.append(_row(metric, stat(flat_a), stat(flat_b), ci,
                         note=note if ci else f"{note}: one sample, no noise estimate"))
    for key in ("rollouts_per_s", "trainer_tokens_per_s_median"):
        rows.append(_row(key, a["throughput"][key], b["throughput"][key]))
    rows.append(_row("warmup_steps", a["warmup_steps"], b["warmup_steps"]))
    return rows


def _per_task(report: dict, value: Callable[[list[bool]], float], min_n: int) -> dict[str, float]:
    return {t: value(o) for t, o in report["per_task"].items() if len(o) >= min_n}


def _eval_metrics(a: dict, b: dict) -> dict[str, tuple[Callable[[list[bool]], float], int]]:
    metrics = {"success_rate": (lambda o: sum(o) / len(o), 1)}
    for k in sorted(set(a["pass_at_k"]) & set(b["pass_at_k"]), key=int):
        metrics[f"pass@{k}"] = (lambda o, k=int(k): pass_at_k(len(o), sum(o), k), int(k))
        metrics[f"pass^{k}"] = (lambda o, k=int(k): pass_hat_k(len(o), sum(o), k), int(k))
    return metrics


def _eval_rows(a: dict, b: dict, n_boot: int, seed: int) -> list[dict]:
    rows = []
    for metric, (value, min_n) in _eval_metrics(a, b).items():
        ta, tb = _per_task(a, value, min_n), _per_task(b, value, min_n)
        if not ta or not tb:
            rows.append(_row(metric, None, None, note="no scored tasks"))
            continue
        va, vb = mean(list(ta.values())), mean(list(tb.values()))
        test = (_success_test(a["per_task"], b["per_task"]) if metric == "success_rate"
                else _sign_test(ta, tb))
        note = f"{test.name if test else 'not tested'}, tasks {len(ta)} vs {len(tb)}"
        ci = None
        if min(len(ta), len(tb)) >= 2:
            ci, _ = bootstrap_task_delta_ci(ta, tb, n_boot=n_boot, seed=seed)
        if ci is not None and ci[0] == ci[1]:  # every resample alike: no spread to show
            ci, note = None, f"{note}; bootstrap CI of zero width not shown"
        row = _row(metric, va, vb, ci, note, test and (test.name, test.p))
        if test is None:  # a bootstrap CI of success outcomes is no test (it can collapse)
            row["beyond_noise"] = None
        elif test.best_p >= SIGNIFICANCE:
            row["beyond_noise"] = None
            row["no_verdict"] = f"too few {test.sample} for a verdict"
        rows.append(row)
    for key in ("flip_rate", "infra_errors", "n_tasks", "n_episodes", "tokens_mean", "wall_s_mean"):
        rows.append(_row(key, a.get(key), b.get(key)))
    return rows


def paired_attempts(a: dict[str, list[bool]], b: dict[str, list[bool]]
                    ) -> list[tuple[bool, bool]] | None:
    """(A, B) outcome pairs when both cover the same task attempts (the same tasks with the
    same number of scored attempts, paired in attempt order); None otherwise."""
    scored_a = {t: o for t, o in a.items() if o}
    scored_b = {t: o for t, o in b.items() if o}
    if scored_a.keys() != scored_b.keys():
        return None
    if any(len(scored_a[t]) != len(scored_b[t]) for t in scored_a):
        return None
    return [pair for t in sorted(scored_a) for pair in zip(scored_a[t], scored_b[t])]


def _success_test(a: dict[str, list[bool]], b: dict[str, list[bool]]) -> _ExactTest:
    """McNemar's exact test on paired attempts, else Fisher's on the success counts."""
    pairs = paired_attempts(a, b)
    if pairs is not None:
        a_only = sum(1 for x, y in pairs if x and not y)
        b_only = sum(1 for x, y in pairs if y and not x)
        tasks = sum(1 for o in a.values() if o)
        sample = (f"shared tasks (n={tasks})" if len(pairs) == tasks
                  else f"paired attempts (n={len(pairs)} on {tasks} shared tasks)")
        return _ExactTest("paired: McNemar exact", mcnemar_exact_p(a_only, b_only),
                          mcnemar_exact_p(len(pairs), 0), sample)
    na, nb = sum(len(o) for o in a.values()), sum(len(o) for o in b.values())
    sa, sb = sum(sum(o) for o in a.values()), sum(sum(o) for o in b.values())
    best = min(fisher_exact_p(na, na, 0, nb), fisher_exact_p(0, na, nb, nb)) if na and nb else 1.0
    return _ExactTest("unpaired: Fisher exact", fisher_exact_p(sa, na, sb, nb), best,
                      f"scored attempts (n={na} vs {nb})")


def _sign_test(ta: dict[str, float], tb: dict[str, float]) -> _ExactTest | None:
    """The sign test over tasks (ties dropped) when both cover the same tasks; None (not
    tested) otherwise."""
    if ta.keys() != tb.keys():
        return None
    a_better = sum(1 for t in ta if ta[t] > tb[t])
    b_better = sum(1 for t in ta if tb[t] > ta[t])
    return _ExactTest("paired: sign test over tasks", mcnemar_exact_p(a_better, b_better),
                      mcnemar_exact_p(len(ta), 0), f"shared tasks (n={len(ta)})")


def _fmt(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def compare_markdown(result: dict, name_a: str = "A", name_b: str = "B") -> str:
    lines = [f"# compare ({result['compared']})", "", f"A = {name_a}", f"B = {name_b}", ""]
    if result["config_changes"]:
        lines += ["config changes:"] + [f"- {k}: {_fmt(va)} → {_fmt(vb)}"
                                        for k, (va, vb) in result["config_changes"].items()]
        lines.append("")
    lines += ["| metric | A | B | delta | change | 95% CI of delta | p | verdict | note |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        ci = "–" if r["ci95"] is None else f"[{r['ci95'][0]:.4g}, {r['ci95'][1]:.4g}]"
        p = "–" if r.get("p_value") is None else f"{r['p_value']:.3g}"
        rel = "–" if r["rel_delta"] is None else f"{r['rel_delta']:+.1%}"
        lines.append(f"| {r['metric']} | {_fmt(r['a'])} | {_fmt(r['b'])} | {_fmt(r['delta'])} | "
                     f"{rel} | {ci} | {p} | {_verdict(r)} | {r['note']} |")
    moved = result.get("moved_phase")
    if moved:
        share = moved["share_of_step_delta"]
        lines += ["", (f"The phase that moved most: **{moved['phase']}** ({_fmt(moved['delta_s'])}"
                       f" s; the step median moved {_fmt(moved['step_median_delta_s'])} s"
                       + ("" if share is None else f", {share:.0%} of it") + ").")]
    return "\n".join(lines) + "\n"


def _verdict(row: dict) -> str:
    if row.get("no_verdict"):
        return row["no_verdict"]
    if row["beyond_noise"] is None:
        return "not tested"
    if row.get("p_value") is not None:
        return "**distinguishable**" if row["beyond_noise"] else "not distinguishable"
    return "**beyond noise**" if row["beyond_noise"] else "within noise"
