"""Markdown rendering of a `swefleet.bench/2` report (numbers come from the report only)."""

from __future__ import annotations

PLOTS = {
    "step_time.png": "step time over steps",
    "step_time_hist.png": "steady-state step-time distribution",
    "phases.png": "phase breakdown",
    "success_by_task.png": "success by task",
}
EVENT_NAMES = {
    "checkpoint": "checkpoint (the step the trainer's checkpoint held up)",
    "after_checkpoint": "after checkpoint (its batch was ready early)",
}
MAX_LISTED_STEPS = 20
"""The runs table lists at most this many step times per run; bench.json has all of them."""


def _s(x: float | None, unit: str = "s") -> str:
    return "–" if x is None else f"{x:.3f}{unit}"


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{x:.1%}"


def bench_markdown(r: dict, plots: list[str] | None = None) -> str:
    b = r["batch_size"]
    lines = [
        "# swefleet bench",
        "",
        f"**Step** — {r['definitions']['step']}",
        "",
        (f"**Batch size** — {b['rollouts_per_step']} rollouts per optimizer step, global "
         f"({b['groups_per_step']} groups × {b['rollouts_per_task']} rollouts per task)."),
        "",
        (f"**Warm-up** — {r['warmup_steps']} leading step(s) excluded from each of "
         f"{r['n_runs']} run(s) ({r['definitions']['warmup']}); {r['steady_state_steps']} "
         f"steady-state steps of {r['steps_per_run']} per run."),
        "",
        "| step time (steady state) | value |",
        "|---|---|",
        f"| median | {_s(r['step_time_median_s'])} |",
        f"| p90 | {_s(r['step_time_p90_s'])} |",
        f"| mean | {_s(r['step_time_mean_s'])} |",
        f"| standard deviation | {_s(r['step_time_std_s'])} |",
        f"| coefficient of variation | {_pct(r['step_time_cv'])} |",
        f"| min / max | {_s(r['step_time_min_s'])} / {_s(r['step_time_max_s'])} |",
        *_best_lines(r),
        *_batch_clock_lines(r),
        *_throughput_lines(r),
        "",
        *_event_lines(r),
        *_phase_lines(r),
        "",
        *_run_lines(r),
        *_run_to_run_lines(r),
        *_excluded_lines(r),
        *_config_lines(r),
    ]
    if plots:
        lines += ["", "## Plots", ""]
        lines += [f"![{PLOTS.get(p, p)}]({p})" for p in plots]
    return "\n".join(lines) + "\n"


def _batch_clock_lines(r: dict) -> list[str]:
    c = r.get("batch_clock") or {}
    if not c.get("n"):
        return []
    return [(f"| batch clock median / CV ({c['warmup_steps']} warm-up) | {_s(c['median_s'])} / "
            f"{_pct(c['cv'])} |")]


def _best_lines(r: dict) -> list[str]:
    if r["best_run"] is None:
        return []
    cv = r["run_to_run_cv"]
    best, mid = r["best_run"], r["median_run"]
    return [
        f"| best run ({best['name']}) median | {_s(best['step_time_median_s'])} |",
        f"| median run ({mid['name']}) median | {_s(mid['step_time_median_s'])} |",
        f"| best vs median run | {_pct(r['best_vs_median'])} |",
        f"| run-to-run CV of medians | {_pct(cv)} |",
    ]


def _gpu_text(conditions: dict) -> str:
    """GPU 0 during the run (median SM clock (lowest), highest temperature, median power)
    where it was sampled, else before it."""
    during = ((conditions.get("during") or {}).get("gpus") or [{}])[0]
    if during.get("samples"):
        return (f"{during['sm_clock_mhz_median']} MHz (min {during['sm_clock_mhz_min']}) / "
                f"max {during['temperature_c_max']} C / {during['power_w_median']} W")
    gpu = ((conditions.get("before") or {}).get("gpus") or [{}])[0]
    return "–" if not gpu else (f"{gpu.get('sm_clock_mhz')} MHz / {gpu.get('temperature_c')} C / "
                                f"{gpu.get('power_w')} W (before)")


def _run_to_run_lines(r: dict) -> list[str]:
    """Per run: steady median, phase medians, tasks drawn, load and GPU state; the phase that
    moved most between runs."""
    v = r.get("run_to_run")
    if not v or len(v["runs"]) < 2:
        return []
    phases = list(v["phase_spreads_s"])
    lines = ["", "## Run to run", "",
             "| run | step median | " + " | ".join(phases) + " | tasks | load (1 min) | GPU "
             "SM clock / temp / power |",
             "|---" * (len(phases) + 5) + "|"]
    for run in v["runs"]:
        cond = (run.get("conditions") or {}).get("before") or {}
        gpu_text = _gpu_text(run.get("conditions") or {})
        load = (cond.get("loadavg") or [None])[0]
        lines.append(f"| {run['name']} | {_s(run['step_time_median_s'])} | "
                     + " | ".join(_s(run["phase_medians_s"][p]) for p in phases)
                     + f" | {run['tasks_drawn']} | {'–' if load is None else load} | {gpu_text} |")
    if v["moved_phase"]:
        jac = v["tasks_jaccard_min"]
        lines += ["", (f"Between runs the step median spread {_s(v['step_median_spread_s'])}; the "
                       f"phase that moved most is **{v['moved_phase']}** (spread "
                       f"{_s(v['phase_spreads_s'][v['moved_phase']])}, "
                       f"{_pct(v['share_of_step_spread'])} of the step's). Smallest overlap "
                       f"of two runs' drawn tasks (Jaccard): "
                       f"{'–' if jac is None else f'{jac:.2f}'}.")]
    return lines


def _throughput_lines(r: dict) -> list[str]:
    t = r["throughput"]
    rps = "–" if t["rollouts_per_s"] is None else f"{t['rollouts_per_s']:.3f}"
    tok = t["trainer_tokens_per_s_median"]
    return [f"| rollouts/s (after warm-up, events included) | {rps} |",
            f"| trainer tokens/s (median) | {'–' if tok is None else f'{tok:.0f}'} |"]


def _event_lines(r: dict) -> list[str]:
    """The periodic events' rows (left out of the steady statistics above, never hidden)."""
    ev = r.get("periodic_events") or {}
    lines = ["## Periodic events (not in the steady statistics above)", ""]
    if not ev.get("checkpoints"):
        return [*lines, f"None: {ev.get('note') or 'no event recorded'}.", ""]
    lines += [(f"{ev['checkpoints']} trainer checkpoint(s) after the warm-up "
               f"(trainer.checkpoint_every = {ev['checkpoint_every']})."), "",
              "| event | steps | median | min / max | extra vs steady median |",
              "|---|---|---|---|---|"]
    for name, e in ev["events"].items():
        extra = "–" if e["extra_s"] is None else f"{e['extra_s']:+.3f}s"
        lines.append(f"| {EVENT_NAMES.get(name, name)} | {e['n']} | {_s(e['median_s'])} | "
                     f"{_s(e['min_s'])} / {_s(e['max_s'])} | {extra} |")
    net = ev["net_extra_s_per_checkpoint"]
    lines.append(f"| net cost per checkpoint (both steps) | | | | "
                 f"{'–' if net is None else f'{net:+.3f}s'} |")
    return [*lines, ""]


def _phase_lines(r: dict) -> list[str]:
    title = ("## Phases (steady state; they overlap in the async pipeline, so they need not sum "
             "to the step time)")
    lines = [title, "", "| phase | median | mean | of step median |", "|---|---|---|---|"]
    for name, p in r["phases"].items():
        lines.append(f"| {name.removesuffix('_s')} | {_s(p['median_s'])} | {_s(p['mean_s'])} | "
                     f"{_pct(p['fraction_of_step_median'])} |")
    return lines


def _run_lines(r: dict) -> list[str]:
    lines = ["## Runs", "",
             "| run | warm-up detected | steady median | p90 | CV | wall | step times |",
             "|---|---|---|---|---|---|---|"]
    for run in r["runs"]:
        s = run["steady"]
        times = " ".join(f"{row['time_s']:.2f}{'*' if row.get('event') else ''}"
                         for row in run["steps"][:MAX_LISTED_STEPS])
        if len(run["steps"]) > MAX_LISTED_STEPS:
            times += " … (bench.json)"
        lines.append(f"| {run['name']} | {run['warmup_steps_detected']} | {_s(s['median_s'])} | "
                     f"{_s(s['p90_s'])} | {_pct(s['cv'])} | {_s(run['wall_s'])} | {times} |")
    return [*lines, "", "`*`: a periodic event's step (above), not in the steady statistics."]


def _excluded_lines(r: dict) -> list[str]:
    if not r["excluded_runs"]:
        return []
    excluded = "; ".join(f"{e['name']} ({e['reason']})" for e in r["excluded_runs"])
    return ["", f"Excluded: {excluded}"]


def _config_lines(r: dict) -> list[str]:
    if not r["config_differs_between_runs"]:
        return []
    return ["", "**Warning**: the runs' configs differ in "
            + ", ".join(r["config_differs_between_runs"])]
