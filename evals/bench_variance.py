"""Where run-to-run variance of a bench comes from: each run's steady phase medians, the
tasks it drew, and the machine's state around it, side by side, with the phase that moved.

For each phase (`evals/bench_data.PHASES`) the spread of its per-run medians (max - min) is
compared with the spread of the runs' step-time medians: `moved_phase` is the phase with the
largest spread, and `share_of_step_spread` says how much of the step's spread it accounts for
(a phase that moved as much as the step did explains it; one that did not move cannot).
Drawn tasks: each run's multiset of episode task ids; `tasks_jaccard_min` is the smallest
overlap between two runs' task sets (1: they drew the same tasks). Conditions (load average,
GPU clocks, temperature and power before and after each run) come from the bench's
`bench_env.json` (`swefleet/app/bench_conditions.py`).
"""

from __future__ import annotations

from itertools import combinations

from swefleet.evals.bench_data import PHASES, RunData
from swefleet.evals.bench_events import is_steady

from swefleet.stats import median


def _steady_median(rows: list[dict], key: str) -> float | None:
    vals = [r[key] for r in rows if r.get(key) is not None]
    return median(vals) if vals else None


def run_to_run(runs: list[RunData], warmup: int, environment: dict | None) -> dict:
    """The `run_to_run` section of a bench report (see the module docstring)."""
    conditions = (environment or {}).get("run_conditions", {})
    per_run = []
    for run in runs:
        steady = [row for row in run.rows[warmup:] if is_steady(row)]
        tasks = sorted({e["task_id"] for e in run.episodes})
        per_run.append({
            "name": run.name, "step_time_median_s": _steady_median(steady, "time_s"),
            "phase_medians_s": {p: _steady_median(steady, p) for p in PHASES},
            "tasks_drawn": len(tasks), "episodes": len(run.episodes),
            "conditions": conditions.get(run.name)})
    return {"runs": per_run, **_moved(per_run), "tasks_jaccard_min": _jaccard_min(runs)}


def _spread(values: list[float | None]) -> float | None:
    vals = [v for v in values if v is not None]
    return max(vals) - min(vals) if len(vals) > 1 else None


def _moved(per_run: list[dict]) -> dict:
    step = _spread([r["step_time_median_s"] for r in per_run])
    spreads = {p: _spread([r["phase_medians_s"][p] for r in per_run]) for p in PHASES}
    known = {p: s for p, s in spreads.items() if s is not None}
    if step is None or not known:
        return {"step_median_spread_s": step, "phase_spreads_s": spreads, "moved_phase": None,
                "share_of_step_spread": None}
    moved = max(known, key=known.get)
    return {"step_median_spread_s": step, "phase_spreads_s": spreads, "moved_phase": moved,
            "share_of_step_spread": known[moved] / step if step else None}


def _jaccard_min(runs: list[RunData]) -> float | None:
    sets = [{e["task_id"] for e in r.episodes} for r in runs if r.episodes]
    pairs = [len(a & b) / len(a | b) for a, b in combinations(sets, 2) if a | b]
    return min(pairs) if pairs else None
