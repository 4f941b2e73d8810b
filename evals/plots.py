"""PNG plots: the shared drawing rules, and the bench's plots.

matplotlib is imported inside the functions (the CLI must stay light) and used through `Figure`
objects, which render with Agg and need no display. The rules every plot follows: a rate is
drawn on a zero-based axis up to 1 (or more where the data is); any other value on an axis that
includes 0, so jitter is never blown up by a cut axis; labels carry units; a legend says what
each line is. A plot without data is not drawn: its file is removed and the caller says why
(`Plot.missing`). Other plot families: `plots_train.py` (rl, sft), `plots_eval.py` (eval).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path


@dataclass(frozen=True)
class Plot:
    """One plot a report may draw: written, or not drawn and why."""

    name: str
    """File name (`reward.png`)."""
    about: str
    """What it shows, one line (index.md lists it)."""
    missing: str = ""
    """Why it was not drawn ("" when it was)."""

    @property
    def written(self) -> bool:
        return not self.missing


@dataclass(frozen=True)
class Line:
    """One line of a line plot: what it is (the legend entry) and its points."""

    label: str
    xs: Sequence[float]
    ys: Sequence[float]


@dataclass(frozen=True)
class Band:
    """A shaded band around a line: what it is (the legend entry) and its bounds per point."""

    label: str
    xs: Sequence[float]
    lows: Sequence[float]
    highs: Sequence[float]


STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "x")


def figure(width: float = 7.0, height: float = 4.0):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    return fig, fig.subplots()


def legend_below(fig, ax) -> None:
    """The legend under the axes, where it hides no data."""
    handles, labels = ax.get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", fontsize="small",
               ncols=2 if len(labels) > 3 else 1)


def not_drawn(path: Path, about: str, why: str) -> Plot:
    """No data: no file (an older one of that name is removed, so none outlives its data)."""
    path.unlink(missing_ok=True)
    return Plot(path.name, about, missing=why)


def zero_based(ax, values: Sequence[float], rate: bool = False) -> None:
    """A y axis that includes 0 (and, for a rate, 1): its range never exaggerates jitter."""
    lo, hi = min(values, default=0.0), max(values, default=0.0)
    top = max(hi, 1.0) if rate else max(hi, 0.0)
    bottom = min(lo, 0.0)
    pad = 0.05 * ((top - bottom) or 1.0)
    ax.set_ylim(bottom - (pad if bottom < 0 else 0.0), top + pad)


def line_plot(path: Path, about: str, lines: list[Line], *, xlabel: str, ylabel: str,
              title: str, rate: bool = False, why_empty: str, bands: Sequence[Band] = ()) -> Plot:
    """Lines over steps on a zero-based y axis, `bands` shaded under them (the first line's
    colour); not drawn when no line has a point."""
    lines = [ln for ln in lines if len(ln.xs)]
    if not lines:
        return not_drawn(path, about, why_empty)
    from matplotlib.ticker import MaxNLocator

    fig, ax = figure()
    bands = [b for b in bands if len(b.xs)]
    for b in bands:
        ax.fill_between(b.xs, b.lows, b.highs, color="tab:blue", alpha=0.2, linewidth=0,
                        label=b.label)
    for i, ln in enumerate(lines):  # styles differ, so a line hidden under another shows
        ax.plot(ln.xs, ln.ys, linestyle=STYLES[i % len(STYLES)],
                marker=MARKERS[i % len(MARKERS)], markersize=4 + 2 * (i == 0), label=ln.label,
                markerfacecolor="none" if i == 0 else None)
    zero_based(ax, [y for ln in lines for y in ln.ys]
               + [y for b in bands for y in (*b.lows, *b.highs)], rate=rate)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel=xlabel, ylabel=ylabel, title=title)
    ax.grid(alpha=0.3)
    legend_below(fig, ax)
    fig.savefig(path)
    return Plot(path.name, about)


# ---------------------------------------------------------------- bench


def plot_step_times(report: dict, path: Path):
    """Step time over steps, one line per run, on a zero-based axis; warm-up shaded. Returns
    the figure."""
    from matplotlib.ticker import MaxNLocator

    fig, ax = figure()
    runs = report["runs"]
    for i, run in enumerate(runs):
        ax.plot([r["step"] for r in run["steps"]], [r["time_s"] for r in run["steps"]],
                marker="o", markersize=3, label=f"run {i + 1} of {len(runs)}")
    if report["warmup_steps"]:
        ax.axvspan(-0.5, report["warmup_steps"] - 0.5, color="grey", alpha=0.2,
                   label="warm-up (left out of the statistics)")
    if report["step_time_median_s"] is not None:
        ax.axhline(report["step_time_median_s"], color="black", linestyle="--",
                   label="median of the steady-state steps, all runs")
    zero_based(ax, [r["time_s"] for run in runs for r in run["steps"]])
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel="step", ylabel="step time (s)",
           title=f"step time per step: {len(runs)} run(s) of the same config")
    ax.grid(alpha=0.3)
    legend_below(fig, ax)
    fig.savefig(path)
    return fig


def plot_step_time_hist(report: dict, path: Path) -> None:
    """Distribution of the steady-state step times from 0 s, median and p90 marked."""
    w = report["warmup_steps"]
    times = [r["time_s"] for run in report["runs"] for r in run["steps"][w:] if not r.get("event")]
    fig, ax = figure()
    ax.hist(times, bins=min(30, max(5, len(times) // 2)), color="tab:blue", alpha=0.8,
            label="steady-state steps, all runs")
    ax.axvline(report["step_time_median_s"], color="black", linestyle="--", label="median")
    ax.axvline(report["step_time_p90_s"], color="tab:red", linestyle=":", label="p90")
    ax.set_xlim(left=0)
    ax.set(xlabel="step time (s)", ylabel="steps",
           title=f"steady-state step time (n={len(times)})")
    ax.legend(fontsize="small")
    fig.savefig(path)


def plot_phases(report: dict, path: Path) -> None:
    """Median seconds per phase next to the median step time."""
    phases = {k.removesuffix("_s"): v["median_s"] for k, v in report["phases"].items()
              if v["median_s"] is not None}
    fig, ax = figure()
    names = ["step", *phases]
    values = [report["step_time_median_s"], *phases.values()]
    ax.barh(names, values, color=["black"] + ["tab:orange"] * len(phases))
    ax.invert_yaxis()
    ax.set(xlabel="median seconds (steady state)", title="phase breakdown (phases overlap)")
    fig.savefig(path)


BENCH_PLOTS = {
    "step_time.png": "step time over steps from 0 s, one line per run, warm-up shaded",
    "step_time_hist.png": "distribution of the steady-state step times, median and p90 marked",
    "phases.png": "median seconds per phase next to the median step time",
    "success_by_task.png": "rollout success by task, all runs (resolved / scored episodes, "
                           "95% Wilson interval)",
}


def bench_plots(report: dict, out: Path) -> list[Plot]:
    """Draws the bench plots that have data (removes those that have none); returns them all,
    drawn or not and why."""
    from swefleet.evals.plots_eval import plot_success_by_task

    plot_step_times(report, out / "step_time.png")
    plots = [Plot("step_time.png", BENCH_PLOTS["step_time.png"])]
    for name, draw in (("step_time_hist.png", plot_step_time_hist), ("phases.png", plot_phases)):
        if report["step_time_median_s"] is not None:
            draw(report, out / name)
            plots.append(Plot(name, BENCH_PLOTS[name]))
        else:
            plots.append(not_drawn(out / name, BENCH_PLOTS[name],
                                   "no steady-state step (every step is warm-up or an event)"))
    success = {t: (s["resolved"], s["scored"])
               for t, s in report["rollouts"]["success_by_task"].items()}
    plot = plot_success_by_task(success, out / "success_by_task.png",
                                "RL rollout success by task, all runs")
    return [*plots, replace(plot, about=BENCH_PLOTS["success_by_task.png"])]


def write_bench_plots(report: dict, out: Path) -> list[str]:
    """`bench_plots`: the names of the written ones."""
    return [p.name for p in bench_plots(report, out) if p.written]
