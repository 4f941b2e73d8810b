"""PNG plots of bench and eval reports. matplotlib is imported inside the functions (the CLI
must stay light) and used through `Figure` objects, which render with Agg and need no display."""

from __future__ import annotations

from pathlib import Path


def _figure(width: float = 7.0, height: float = 4.0):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    return fig, fig.subplots()


def plot_step_times(report: dict, path: Path) -> None:
    """Step time over steps, one line per run; the excluded warm-up is shaded."""
    fig, ax = _figure()
    for run in report["runs"]:
        ax.plot([r["step"] for r in run["steps"]], [r["time_s"] for r in run["steps"]],
                marker="o", markersize=3, label=run["name"])
    if report["warmup_steps"]:
        ax.axvspan(-0.5, report["warmup_steps"] - 0.5, color="grey", alpha=0.2, label="warm-up")
    if report["step_time_median_s"] is not None:
        ax.axhline(report["step_time_median_s"], color="black", linestyle="--",
                   label="steady median")
    ax.set(xlabel="step", ylabel="step time (s)", title="step time over steps")
    ax.legend(fontsize="small")
    fig.savefig(path)


def plot_step_time_hist(report: dict, path: Path) -> None:
    """Distribution of the steady-state step times, median and p90 marked."""
    w = report["warmup_steps"]
    times = [r["time_s"] for run in report["runs"] for r in run["steps"][w:]]
    fig, ax = _figure()
    ax.hist(times, bins=min(30, max(5, len(times) // 2)), color="tab:blue", alpha=0.8)
    ax.axvline(report["step_time_median_s"], color="black", linestyle="--", label="median")
    ax.axvline(report["step_time_p90_s"], color="tab:red", linestyle=":", label="p90")
    ax.set(xlabel="step time (s)", ylabel="steps", title=f"steady-state step time (n={len(times)})")
    ax.legend(fontsize="small")
    fig.savefig(path)


def plot_phases(report: dict, path: Path) -> None:
    """Median seconds per phase next to the median step time."""
    phases = {k.removesuffix("_s"): v["median_s"] for k, v in report["phases"].items()
              if v["median_s"] is not None}
    fig, ax = _figure()
    names = ["step", *phases]
    values = [report["step_time_median_s"], *phases.values()]
    ax.barh(names, values, color=["black"] + ["tab:orange"] * len(phases))
    ax.invert_yaxis()
    ax.set(xlabel="median seconds (steady state)", title="phase breakdown (phases overlap)")
    fig.savefig(path)


def plot_success_by_task(success: dict[str, tuple[int, int]], path: Path, title: str) -> None:
    """success: task -> (resolved, scored attempts)."""
    tasks = sorted(success)
    rates = [success[t][0] / success[t][1] if success[t][1] else 0.0 for t in tasks]
    fig, ax = _figure(7.0, max(2.5, 0.3 * len(tasks) + 1.0))
    bars = ax.barh(tasks, rates, color="tab:green")
    ax.bar_label(bars, labels=[f"{c}/{n}" for c, n in (success[t] for t in tasks)],
                 fontsize="small", padding=2)
    ax.set_xlim(0, 1.15)
    ax.invert_yaxis()
    ax.set(xlabel="success rate", title=title)
    fig.savefig(path)


def write_bench_plots(report: dict, out: Path) -> list[str]:
    """Writes the bench plots that have data; returns their file names."""
    written = ["step_time.png"]
    plot_step_times(report, out / "step_time.png")
    if report["step_time_median_s"] is not None:
        plot_step_time_hist(report, out / "step_time_hist.png")
        plot_phases(report, out / "phases.png")
        written += ["step_time_hist.png", "phases.png"]
    success = {t: (s["resolved"], s["scored"])
               for t, s in report["rollouts"]["success_by_task"].items()}
    if success:
        plot_success_by_task(success, out / "success_by_task.png", "rollout success by task")
        written.append("success_by_task.png")
    return written


def write_eval_plots(report: dict, out: Path) -> list[str]:
    success = {t: (sum(o), len(o)) for t, o in report["per_task"].items()}
    if not success:
        return []
    plot_success_by_task(success, out / "success_by_task.png", "eval success by task")
    return ["success_by_task.png"]
