"""Eval report: every number recomputed from the raw per-episode records (`episodes.jsonl`).

Schema `swefleet.eval/2` (JSON): success_rate, ci95, pass_at_k, pass_hat_k, avg_at_k, flip_rate,
n_tasks, n_episodes, infra_errors, tampered, refused_submits, resolved_after_refused_submit,
success_rate_infra_as_failure, tokens_mean, wall_s_mean, per_task; an eval over several splits
adds `per_split` (each split's figures); an eval of a trained checkpoint adds `trained_overlap`
(`evals/trained_tasks.py`), shown first in report.md. Infra errors are excluded from the rates
(and counted); the `_infra_as_failure` rate counts them as failures, for comparison.
"""

from __future__ import annotations

from collections import defaultdict

from swefleet.evals.chat_endpoint import serving_line
from swefleet.evals.stats import (
    flip_rate,
    mean_pass_at_k,
    mean_pass_hat_k,
    success_rate,
    success_rate_ci,
)
from swefleet.evals.trained_tasks import overlap_line

SCHEMA = "swefleet.eval/2"


def outcomes_by_task(records: list[dict], *, infra_as_failure: bool = False) -> dict[str, list[bool]]:
    """Scored outcomes per task in attempt order (not finishing order: a paired comparison
    pairs attempts by position)."""
    out: dict[str, list[bool]] = defaultdict(list)
    for r in sorted(records, key=lambda r: (r["task_id"], r.get("attempt", 0))):
        if r["resolved"] is None:
            if infra_as_failure:
                out[r["task_id"]].append(False)
            continue
        out[r["task_id"]].append(bool(r["resolved"]))
    return dict(out)


def build_report(records: list[dict], k: int) -> dict:
    outcomes = outcomes_by_task(records)
    all_tasks = sorted({r["task_id"] for r in records})
    ks = list(range(1, k + 1))
    lo, hi = success_rate_ci(outcomes)
    tokens = [r.get("tokens", 0) for r in records]
    walls = [r.get("wall_s", 0.0) for r in records]
    return {
        "schema": SCHEMA,
        "success_rate": success_rate(outcomes),
        "ci95": [lo, hi],
        "pass_at_k": {str(i): mean_pass_at_k(outcomes, i) for i in ks},
        "pass_hat_k": {str(i): mean_pass_hat_k(outcomes, i) for i in ks},
        "avg_at_k": success_rate(outcomes),
        "flip_rate": flip_rate(outcomes),
        "n_tasks": len(all_tasks),
        "n_episodes": len(records),
        "infra_errors": sum(1 for r in records if r["resolved"] is None),
        "tampered": sum(1 for r in records if (r.get("grade") or {}).get("status") == "tampered"),
        "refused_submits": sum(1 for r in records if r.get("refused_submits")),
        "resolved_after_refused_submit": sum(
            1 for r in records if r.get("refused_submits") and r["resolved"]),
        "success_rate_infra_as_failure": success_rate(
            outcomes_by_task(records, infra_as_failure=True)),
        "tokens_mean": sum(tokens) / len(tokens) if tokens else 0.0,
        "wall_s_mean": sum(walls) / len(walls) if walls else 0.0,
        "per_task": {t: outcomes.get(t, []) for t in all_tasks},
    }


def split_fields(records: list[dict], split_of: dict[str, str], k: int) -> dict:
    """`per_split`: for an eval over tasks of more than one split, each split's success rate,
    CI, pass@k and counts, so that a train, a held-out-by-repo and a held-out-by-instance
    split are never averaged into one figure; {} for one split."""
    splits = sorted({split_of.get(r["task_id"]) or "none" for r in records})
    if len(splits) < 2:
        return {}
    out = {}
    for split in splits:
        mine = [r for r in records if (split_of.get(r["task_id"]) or "none") == split]
        outcomes = outcomes_by_task(mine)
        lo, hi = success_rate_ci(outcomes)
        out[split] = {"success_rate": success_rate(outcomes), "ci95": [lo, hi],
                      "pass_at_k": {str(i): mean_pass_at_k(outcomes, i) for i in range(1, k + 1)},
                      "n_tasks": len({r["task_id"] for r in mine}), "n_episodes": len(mine),
                      "infra_errors": sum(1 for r in mine if r["resolved"] is None)}
    return {"per_split": out}


def behaviour_fields(tasks: list) -> dict:
    """`behaviour_graded_tasks`: how many of the eval's tasks are graded by behaviour (a
    deciding test has a recorded probe); the others' twins end with constant checks, which a
    patch that reads the test files can tell apart (docs/tasks.md)."""
    from swefleet.envs.behaviour import graded_by_behaviour

    return {"behaviour_graded_tasks": sum(graded_by_behaviour(t) for t in tasks),
            "selected_tasks": len(tasks)}


def _behaviour_lines(report: dict) -> list[str]:
    if "behaviour_graded_tasks" not in report:
        return []
    n, of = report["behaviour_graded_tasks"], report["selected_tasks"]
    rest = f"; {of - n} by constant checks only" if n < of else ""
    return [f"- graded by behaviour probes: {n} of {of} tasks{rest}"]


def _split_lines(report: dict) -> list[str]:
    lines = []
    for split, f in report.get("per_split", {}).items():
        lo, hi = f["ci95"]
        lines.append(f"- split {split}: **{f['success_rate']:.1%}** (95% CI {lo:.1%} – {hi:.1%}), "
                     f"{f['n_tasks']} tasks, {f['n_episodes']} episodes, "
                     f"{f['infra_errors']} infra errors")
    return lines


def _refused_line(report: dict) -> str:
    return (f"- submits refused by the check at submit (the issue's script still failed): "
            f"{report['refused_submits']} episodes, {report['resolved_after_refused_submit']} "
            "of them resolved in the end")


def report_markdown(report: dict) -> str:
    lo, hi = report["ci95"]
    lines = [
        "# swefleet eval",
        "",
        *([overlap_line(report["trained_overlap"])] if "trained_overlap" in report else []),
        *([serving_line(report)] if "api" in report else []),
        f"- success rate: **{report['success_rate']:.1%}** (95% CI {lo:.1%} – {hi:.1%})",
        *_split_lines(report),
        (f"- tasks: {report['n_tasks']}, episodes: {report['n_episodes']}, "
         f"infra errors: {report['infra_errors']} "
         f"(rate with them as failures: {report['success_rate_infra_as_failure']:.1%})"
         f", tampered grades: {report.get('tampered', 0)}"),
        *_behaviour_lines(report),
        "- pass@k: " + ", ".join(f"k={k}: {_pct(v)}" for k, v in report["pass_at_k"].items()),
        "- pass^k: " + ", ".join(f"k={k}: {_pct(v)}" for k, v in report["pass_hat_k"].items()),
        (f"- flip rate: {report['flip_rate']:.1%}; tokens/episode: {report['tokens_mean']:.0f}; "
         f"wall s/episode: {report['wall_s_mean']:.1f}"),
        *([_refused_line(report)] if report.get("refused_submits") else []),
        "",
        "| task | outcomes |",
        "|---|---|",
    ]
    for task, outs in report["per_task"].items():
        lines.append(f"| {task} | {''.join('✓' if o else '✗' for o in outs) or 'infra'} |")
    return "\n".join(lines) + "\n"


def _pct(v: float | None) -> str:
    return "n/a (no task has k scored attempts)" if v is None else f"{v:.1%}"
