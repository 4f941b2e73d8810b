"""`swefleet report compare A.json B.json`: what changed from A to B and whether it is beyond noise.

Values are recomputed from the raw records each report carries (bench: per-step rows of every
run; eval: per-task outcomes). Noise (docs/bench.md):
- bench: 95% CI of stat(B) - stat(A) from a two-level bootstrap (runs, then steps in a run);
- eval: 95% CI of mean over tasks of the per-task value, bootstrap over tasks, paired when both
  reports cover the same tasks.
A delta is "beyond noise" when its CI excludes 0. Metrics without raw samples, or with a single
one on a side (a bootstrap of one value has no spread), are "not tested".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from swefleet.evals.bench_data import PHASES
from swefleet.evals.bench_report import SCHEMA as BENCH_SCHEMA
from swefleet.evals.bench_report import config_diff
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
    else:
        rows, changes = _eval_rows(a, b, n_boot, seed), {}
    return {"schema": SCHEMA, "compared": kind, "config_changes": changes, "rows": rows}


def _row(metric: str, va: float | None, vb: float | None,
         ci: tuple[float, float] | None = None, note: str = "") -> dict:
    delta = None if va is None or vb is None else vb - va
    return {
        "metric": metric, "a": va, "b": vb, "delta": delta,
        "rel_delta": delta / va if delta is not None and va else None,
        "ci95": list(ci) if ci else None,
        "beyond_noise": None if ci is None else not (ci[0] <= 0.0 <= ci[1]),
        "note": note,
    }


def steady_samples(report: dict, field: str) -> list[list[float]]:
    """Per run, the steady-state values of one per-step column (warm-up rows dropped)."""
    w = report["warmup_steps"]
    return [[row[field] for row in run["steps"][w:] if row[field] is not None]
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
        if min(len(ta), len(tb)) < 2:
            rows.append(_row(metric, va, vb, note=f"tasks {len(ta)} vs {len(tb)}: one task, no "
                                                  "noise estimate"))
            continue
        ci, paired = bootstrap_task_delta_ci(ta, tb, n_boot=n_boot, seed=seed)
        note = f"{'paired' if paired else 'unpaired'}, tasks {len(ta)} vs {len(tb)}"
        rows.append(_row(metric, va, vb, ci, note))
    for key in ("flip_rate", "infra_errors", "n_tasks", "n_episodes", "tokens_mean", "wall_s_mean"):
        rows.append(_row(key, a.get(key), b.get(key)))
    return rows


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
    lines += ["| metric | A | B | delta | change | 95% CI of delta | verdict | note |",
              "|---|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        ci = "–" if r["ci95"] is None else f"[{r['ci95'][0]:.4g}, {r['ci95'][1]:.4g}]"
        verdict = {None: "not tested", True: "**beyond noise**", False: "within noise"}[
            r["beyond_noise"]]
        rel = "–" if r["rel_delta"] is None else f"{r['rel_delta']:+.1%}"
        lines.append(f"| {r['metric']} | {_fmt(r['a'])} | {_fmt(r['b'])} | {_fmt(r['delta'])} | "
                     f"{rel} | {ci} | {verdict} | {r['note']} |")
    return "\n".join(lines) + "\n"
