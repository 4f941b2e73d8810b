"""The bench report (schema `swefleet.bench/1`, docs/bench.md): every number is recomputed from
the raw per-step and per-episode records of the run directories (evals/bench_data.py).

One warm-up count is excluded from every run: the largest count `detect_warmup` finds in any of
them, so all runs are compared over the same steps. After the warm-up, the steps a periodic event
set (a trainer checkpoint: evals/bench_events.py) are reported on their own, not in the steady
statistics.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from swefleet.evals.bench_data import PHASES, RunData, find_run_dirs, load_run
from swefleet.evals.bench_events import events_report, is_steady
from swefleet.evals.bench_variance import run_to_run
from swefleet.evals.steptime import coef_var, detect_warmup, summarize, warmup_threshold

from swefleet.stats import median
from swefleet.types import NON_SCORABLE

SCHEMA = "swefleet.bench/2"
DEFINITIONS = {
    "step": "One optimizer step of the async pipeline, timed as the interval between two "
            "consecutive policy versions being served to the fleet (step i ends when v(i+1) is "
            "served; step 0 starts at the RL loop start). In steady state this is the time from "
            "the first request of a step's batch to its new weights being served, amortized "
            "over the overlap of rollouts and training.",
    "batch_size": "Rollouts per optimizer step, global (all rollout workers together): "
                  "orchestrator.groups_per_step * orchestrator.rollouts_per_task.",
    "warmup": "Step 0 always; then leading steps outside median -/+ max(3 * 1.4826 * MAD, 5% "
              "of median) of the run's second half (above: still warming up; below: a batch "
              "made while step 0 ran), at most half the run. The largest count over runs is "
              "excluded from every run.",
    "batch_clock": "The same runs timed by the orchestrator instead: the interval between two "
                   "consecutive batches handed to the trainer (metrics.jsonl time/step_s), with "
                   "its own warm-up count by the same rule. It is the pipeline's period without "
                   "the train/export/sync latency jitter the step clock adds.",
    "periodic_events": "After the warm-up, the step a trainer checkpoint held up (the trainer "
                       "started it after publishing the previous version: checkpoint_blocking_s "
                       "> 0 in trainer_metrics.jsonl) and the step after it (its batch was ready "
                       "early) are left out of the steady-state statistics and reported in "
                       "periodic_events: count, median, extra seconds vs the steady median.",
    "noise": "swefleet report compare: 95% two-level bootstrap CI of the difference (runs, then "
             "steps within a run); beyond noise when the CI excludes 0.",
}


def build_bench_report(runs: list[RunData], environment: dict | None = None) -> dict:
    used = [r for r in runs if r.complete and r.rows]
    if not used:
        raise ValueError("no complete run: " + ", ".join(
            f"{r.name} served {len(r.rows)}/{r.expected_steps} versions" for r in runs))
    warmup = max(detect_warmup(r.step_times) for r in used)
    after_warmup = [row for r in used for row in r.rows[warmup:]]
    steady_rows = [row for row in after_warmup if is_steady(row)]
    steady = [row["time_s"] for row in steady_rows]
    per_run = [_run_entry(r, warmup) for r in used]
    stats = summarize(steady)
    orch = used[0].config["orchestrator"]
    checkpoint_every = used[0].config.get("trainer", {}).get("checkpoint_every")
    return {
        "schema": SCHEMA,
        "definitions": DEFINITIONS,
        "config": _strip(used[0].config),
        "config_differs_between_runs": sorted(
            {k for r in used[1:] for k in config_diff(used[0].config, r.config)}),
        "environment": environment,
        "n_runs": len(used),
        "steps_per_run": used[0].expected_steps,
        "batch_size": {"rollouts_per_step": orch["groups_per_step"] * orch["rollouts_per_task"],
                       "groups_per_step": orch["groups_per_step"],
                       "rollouts_per_task": orch["rollouts_per_task"]},
        "warmup_steps": warmup,
        "steady_state_steps": len(steady),
        **{f"step_time_{k}": v for k, v in stats.items() if k != "n"},
        **_best_vs_median(per_run),
        "batch_clock": _batch_clock(used),
        "periodic_events": events_report(after_warmup, stats["median_s"], checkpoint_every,
                                         used[0].expected_steps),
        "phases": _phases(steady_rows, stats["median_s"]),
        "throughput": _throughput(after_warmup),
        "rollouts": _rollouts(used),
        "run_to_run": run_to_run(used, warmup, environment),
        "runs": per_run,
        "excluded_runs": [{"name": r.name, "reason": f"incomplete: {len(r.rows)}/"
                           f"{r.expected_steps} versions served"}
                          for r in runs if all(r is not u for u in used)],
    }


def bench_report_from_dir(root: Path, environment: dict | None = None) -> dict:
    return build_bench_report([load_run(p) for p in find_run_dirs(root)], environment)


def _run_entry(run: RunData, warmup: int) -> dict:
    times = run.step_times
    return {
        "name": run.name,
        "warmup_steps_detected": detect_warmup(times),
        "warmup_threshold_s": warmup_threshold(times) if len(times) > 1 else None,
        "wall_s": run.rows[-1]["served_at_s"],
        "steady": summarize([row["time_s"] for row in run.rows[warmup:] if is_steady(row)]),
        "steps": run.rows,
    }


def _batch_clock(runs: list[RunData]) -> dict:
    series = [[row["batch_interval_s"] for row in r.rows] for r in runs]
    if any(x is None for s in series for x in s):
        return {"warmup_steps": None, **summarize([])}
    warmup = max(detect_warmup(s) for s in series)
    return {"warmup_steps": warmup, **summarize([x for s in series for x in s[warmup:]])}


def _best_vs_median(per_run: list[dict]) -> dict:
    """Best run: lowest steady median. Median run: the lower middle of runs sorted by it."""
    ranked = sorted((r for r in per_run if r["steady"]["n"]), key=lambda r: r["steady"]["median_s"])
    if not ranked:
        return {"best_run": None, "median_run": None, "best_vs_median": None, "run_to_run_cv": None}
    best, mid = ranked[0], ranked[(len(ranked) - 1) // 2]
    medians = [r["steady"]["median_s"] for r in per_run if r["steady"]["n"]]
    return {
        "best_run": {"name": best["name"], "step_time_median_s": best["steady"]["median_s"]},
        "median_run": {"name": mid["name"], "step_time_median_s": mid["steady"]["median_s"]},
        "best_vs_median": best["steady"]["median_s"] / mid["steady"]["median_s"] - 1.0,
        "run_to_run_cv": coef_var(medians) if len(medians) > 1 else None,
    }


def _phases(rows: list[dict], step_median: float | None) -> dict:
    out = {}
    for phase in PHASES:
        vals = [r[phase] for r in rows if r[phase] is not None]
        s = summarize(vals)
        out[phase] = {"n": s["n"], "median_s": s["median_s"], "mean_s": s["mean_s"],
                      "fraction_of_step_median": (s["median_s"] / step_median
                                                  if vals and step_median else None)}
    return out


def _throughput(rows: list[dict]) -> dict:
    """Over every step after the warm-up, periodic events included (they are part of the rate)."""
    timed = [r for r in rows if r["rollouts"] is not None]
    total_s = sum(r["time_s"] for r in timed)
    tokens = [r["tokens_per_s"] for r in rows if r["tokens_per_s"] is not None]
    return {"rollouts_per_s": sum(r["rollouts"] for r in timed) / total_s if total_s else None,
            "trainer_tokens_per_s_median": median(tokens) if tokens else None}


def _rollouts(runs: list[RunData]) -> dict:
    """Success by task over every episode of the runs; non-scorable statuses are not scored."""
    statuses: Counter[str] = Counter()
    by_task: dict[str, list[int]] = {}
    for e in (e for r in runs for e in r.episodes):
        statuses[e["status"]] += 1
        counts = by_task.setdefault(e["task_id"], [0, 0])
        if e["status"] not in NON_SCORABLE:
            counts[0] += e["status"] == "resolved"
            counts[1] += 1
    return {
        "episodes": sum(statuses.values()),
        "statuses": dict(sorted(statuses.items())),
        "success_by_task": {t: {"resolved": c, "scored": n, "rate": c / n if n else None}
                            for t, (c, n) in sorted(by_task.items())},
    }


def flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def config_diff(a: dict, b: dict) -> dict[str, tuple]:
    """Dotted keys whose values differ (output_dir ignored): key -> (a value, b value)."""
    fa, fb = flatten(_strip(a)), flatten(_strip(b))
    return {k: (fa.get(k), fb.get(k)) for k in sorted(fa.keys() | fb.keys())
            if fa.get(k) != fb.get(k)}


def _strip(config: dict) -> dict:
    return {k: v for k, v in config.items() if k != "output_dir"}
