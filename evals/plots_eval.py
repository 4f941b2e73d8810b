"""An eval's plots (from `report.json`): success by task with its confidence intervals, and
pass@k / pass^k over k. The drawing rules: `plots.py`."""

from __future__ import annotations

from pathlib import Path

from swefleet.evals.plots import Line, Plot, figure, legend_below, line_plot, not_drawn
from swefleet.evals.stats import wilson_interval

SUCCESS_ABOUT = "success rate of each task with its 95% interval, and the mean over tasks"
PASS_AT_K_ABOUT = "pass@k (any of k attempts resolves) and pass^k (all k do) over k"
EVAL_PLOTS = (("success_by_task.png", SUCCESS_ABOUT), ("pass_at_k.png", PASS_AT_K_ABOUT))
"""The eval's plots: (file name, what it shows)."""


def plot_success_by_task(success: dict[str, tuple[int, int]], path: Path, title: str,
                         overall: tuple[float, tuple[float, float]] | None = None) -> Plot:
    """success: task -> (resolved, scored attempts). Each task's rate is a dot with its 95%
    Wilson interval (a task with no scored attempt is named, not drawn); `overall` (the mean
    over tasks and its 95% CI) is a line and a band. Not drawn when no attempt was scored."""
    scored = {t: cn for t, cn in success.items() if cn[1]}
    if not scored:
        why = ("no tasks" if not success else
               "no scored attempt (every episode ended without a verdict: infra error, cancelled)")
        return not_drawn(path, SUCCESS_ABOUT, why)
    tasks = sorted(success)
    fig, ax = figure(7.0, max(3.0, 0.35 * len(tasks) + 2.2))
    if overall is not None:
        rate, (lo, hi) = overall
        ax.axvspan(lo, hi, color="tab:blue", alpha=0.12,
                   label=f"95% CI of the mean: {lo:.0%} – {hi:.0%}")
        ax.axvline(rate, color="tab:blue", label=f"mean over tasks: {rate:.0%}")
    _task_dots(ax, tasks, success)
    ax.set_xlim(-0.03, 1.15)
    ax.set_xticks([0, 0.25, 0.5, 0.75, 1.0], ["0%", "25%", "50%", "75%", "100%"])
    ax.set_ylim(len(tasks) - 0.5, -0.5)  # first task on top
    ax.set(xlabel="success rate (resolved / scored attempts)", title=title)
    ax.grid(axis="x", alpha=0.3)
    legend_below(fig, ax)
    fig.savefig(path)
    return Plot(path.name, SUCCESS_ABOUT)


def _task_dots(ax, tasks: list[str], success: dict[str, tuple[int, int]]) -> None:
    first = True
    for y, task in enumerate(tasks):
        c, n = success[task]
        if not n:
            ax.text(0.01, y, "no scored attempt", va="center", fontsize="small", color="grey")
            continue
        p = c / n
        lo, hi = wilson_interval(p, n)
        ax.errorbar([p], [y], xerr=[[p - lo], [hi - p]], fmt="o", color="tab:green", capsize=3,
                    label="task: resolved / scored attempts, 95% Wilson interval"
                    if first else None)
        ax.text(1.02, y, f"{c}/{n}", va="center", fontsize="small")
        first = False
    ax.set_yticks(range(len(tasks)), tasks)


def plot_pass_at_k(report: dict, path: Path) -> Plot:
    """pass@k and pass^k over k (rates: 0..1); not drawn with fewer than two k."""
    lines = []
    for key, label in (("pass_at_k", "pass@k: at least one of k attempts resolves"),
                       ("pass_hat_k", "pass^k: all k attempts resolve")):
        points = sorted((int(k), v) for k, v in (report.get(key) or {}).items() if v is not None)
        lines.append(Line(label, [k for k, _ in points], [v for _, v in points]))
    if max(len(ln.xs) for ln in lines) < 2:
        return not_drawn(path, PASS_AT_K_ABOUT,
                         "fewer than two values of k with a task attempted k times (pass@1 is "
                         "the success rate)")
    return line_plot(path, PASS_AT_K_ABOUT, lines, xlabel="k (attempts per task)",
                     ylabel="share of tasks (mean over tasks)", rate=True,
                     title="pass@k and pass^k", why_empty="")


def eval_plots(report: dict, out: Path) -> list[Plot]:
    """The eval plots of `report` (a `swefleet.eval/2` report) in `out`, drawn or not."""
    success = {t: (sum(o), len(o)) for t, o in report["per_task"].items()}
    overall = None
    if "success_rate" in report and report.get("ci95"):
        overall = (report["success_rate"], tuple(report["ci95"]))
    k = max((len(o) for o in report["per_task"].values()), default=0)
    title = f"eval success by task ({len(success)} tasks, up to {k} scored attempts each)"
    return [plot_success_by_task(success, out / "success_by_task.png", title, overall),
            plot_pass_at_k(report, out / "pass_at_k.png")]


def write_eval_plots(report: dict, out: Path) -> list[str]:
    """Writes the eval plots that have data; returns their file names."""
    return [p.name for p in eval_plots(report, out) if p.written]
