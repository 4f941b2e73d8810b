"""`swefleet demo`: the whole loop on one config, in stages (what `make run` does).

1. SFT warm start (`[sft]`, skipped when `sft.steps` is 0): the project's model is fine-tuned on
   the oracle's trajectories of the `[tasks]` (the train split), `swefleet/app/sft.py`;
2. RL from that checkpoint (`swefleet rl` on the same config, `swefleet/app/rl.py`): its table
   shows the reward per step on the train tasks;
3. eval of the final RL checkpoint on held-out tasks (`[final_eval]`, `swefleet eval --agent
   model`), reported whatever it is.

Outputs: `<output_dir>/` is the RL run directory; `sft/` and `eval-<split>/` lie inside it. Run
again on the same `--output-dir`, finished stages are skipped (RL resumes where it stopped); when
every stage was done nothing runs (no server, no trainer) and nothing in the folder changes: the
saved summary is printed.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from swefleet.rundir import read_jsonl


def demo_cli(args: argparse.Namespace) -> int:
    from swefleet.app.config import check_model_path, load_config
    from swefleet.rundir import default_output_dir

    cfg = load_config(args.config, args.set)
    check_model_path(cfg.model)
    out = Path(args.output_dir) if args.output_dir else default_output_dir(cfg.name)
    cfg.output_dir = str(out)
    from swefleet.app.disk_preflight import check_run_disk
    from swefleet.console import make_console

    check_run_disk(cfg, out, sft=bool(cfg.sft.steps))  # every stage's outputs, before any
    if args.restart:  # every stage starts over; the old run is moved aside whole
        from swefleet.fingerprint import set_aside

        set_aside(out)
    stages = _Stages(out, demo_stages(cfg), make_console(stderr=True))
    code = _run_stages(cfg, args, out, stages)
    if code != 0:
        return code
    if not stages.ran and (out / "demo_summary.md").exists():  # a finished demo: untouched
        print((out / "demo_summary.md").read_text(), end="")
        print(f"every stage was done: nothing ran, nothing changed in {out}")
        return 0
    print_demo_summary(cfg, out, stages.times)
    from swefleet.evals.run_report import write_run_report

    write_run_report(out)  # plots and index.md of every stage
    return 0


def demo_stages(cfg) -> list[str]:
    """The stages this config runs, in order: `eval_base`, `sft`, `eval_sft`, `rl`, `eval`."""
    fe = cfg.final_eval
    names = ["eval_base"] if fe.split and fe.base else []
    names += ["sft"] if cfg.sft.steps else []
    names += ["eval_sft"] if fe.split and fe.after_sft and cfg.sft.steps else []
    return names + ["rl"] + (["eval"] if fe.split else [])


def _run_stages(cfg, args: argparse.Namespace, out: Path, stages: _Stages) -> int:
    """Run each stage not finished yet; a finished one keeps its recorded time."""
    from swefleet.app.demo_evals import eval_done, run_stage_eval
    from swefleet.app.rl import run_rl
    from swefleet.app.sft import run_sft
    from swefleet.rundir import RunDir

    split = cfg.final_eval.split

    def evaluate(name: str, stage: str, what: str, model: str) -> int:
        if name not in stages.names or not stages.start(
                name, f"eval of {what} on the {split} tasks", eval_done(cfg, out, stage)):
            return 0
        return stages.timed(run_stage_eval, cfg, args, out, stage, model)

    if code := evaluate("eval_base", "base", cfg.model.path, cfg.model.path):
        return code
    if cfg.sft.steps:
        done = (RunDir(out / "sft").weights_path(cfg.sft.steps) / "config.json").exists()
        source = cfg.sft.trajectories or (f"{cfg.sft.demonstrations} demonstrations of the "
                                          f"{cfg.tasks.split} tasks")
        stages.start("sft", f"SFT warm start ({cfg.sft.steps} steps on {source})", done)
        sft_dir = out / "sft"
        checkpoint = run_sft(cfg, sft_dir) if done else stages.timed(run_sft, cfg, sft_dir)
        cfg.model.name, cfg.model.path = "", str(checkpoint)  # RL starts from the SFT weights
    if code := evaluate("eval_sft", "sft", "the SFT checkpoint", cfg.model.path):
        return code
    from swefleet.orchestrator.resume import finished

    final = RunDir(out).weights_path(cfg.orchestrator.steps)
    rl_done = finished(RunDir(out), cfg.orchestrator.steps)
    start = cfg.model.path or "the random-init model"
    stages.start("rl", f"RL ({cfg.orchestrator.steps} steps from {start})", rl_done)
    code = run_rl(cfg) if rl_done else stages.timed(run_rl, cfg)  # done: checked, not run
    return code or evaluate("eval", "rl", "the final checkpoint", str(final))


class _Stages:
    """Stage banners and times; the times are kept in `demo_times.json`, so a resumed demo
    reports each stage's time from the run that did it, not the no-op of the resume (a stage
    that does not run leaves the file as it is)."""

    def __init__(self, out: Path, names: list[str], console) -> None:
        self.path, self.names, self.console = out / "demo_times.json", names, console
        self.times: dict[str, float] = (json.loads(self.path.read_text())
                                        if self.path.exists() else {})
        self._current = ""
        self.ran = False  # whether a stage ran in this invocation

    def start(self, name: str, what: str, done: bool) -> bool:
        """Print the banner of stage `name`; True when it has to run (not `done`)."""
        from swefleet.console import banner

        i = self.names.index(name) + 1
        kept = " (done, kept)" if done else ""
        banner(self.console, f"[bold]stage {i}/{len(self.names)}{kept}[/]: {what}")
        self._current = name
        return not done

    def timed(self, fn, *args):
        """Run the current stage's `fn(*args)` and record its wall time."""
        from swefleet.rundir import write_text_atomic

        t0 = time.monotonic()
        self.ran = True
        result = fn(*args)
        self.times[self._current] = round(time.monotonic() - t0, 1)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(self.path, json.dumps(self.times, indent=2) + "\n")
        return result


def demonstration_curve(cfg, out: Path) -> list[list[float]]:
    """[RL step, mean probability of the SFT demonstrations] (the first SFT batch's samples,
    `evals/likelihood.py`) under the SFT checkpoint (step 0) and under every RL version whose
    weights folder is still in the run (`[orchestrator] keep_weights`): the policy's progress
    without the sampling noise of a few dozen episodes a step. [] without the SFT batch and
    checkpoint."""
    from swefleet.evals.likelihood import mean_probability
    from swefleet.rundir import RunDir

    sft = RunDir(out / "sft")
    batch, before = sft.batch_path(0), sft.weights_path(cfg.sft.steps)
    if not (batch.exists() and before.is_dir()):
        return []
    rl = RunDir(out)
    versions = [v for v in range(1, cfg.orchestrator.steps + 1) if rl.weights_path(v).is_dir()]
    return [[0, mean_probability(before, batch)]] + [
        [v, mean_probability(rl.weights_path(v), batch)] for v in versions]


def reward_trend(metrics: list[dict], window: int = 5) -> dict | None:
    """Mean reward of the first and last `window` steps (episodes pooled), the standard error of
    their difference (binomial, rewards 0/1) and z = difference / SE; None with fewer than
    2 x `window` steps."""
    steps = [(m["rollout/reward_mean"], m.get("rollout/episodes", 0)) for m in metrics]
    if len(steps) < 2 * window:
        return None

    def pooled(part: list[tuple[float, float]]) -> tuple[float, float]:
        n = sum(k for _, k in part)
        mean = sum(r * k for r, k in part) / n if n else float("nan")
        return mean, (mean * (1 - mean) / n if n else float("nan"))

    (first, v1), (last, v2) = pooled(steps[:window]), pooled(steps[-window:])
    se = (v1 + v2) ** 0.5
    return {"window": window, "first": first, "last": last, "diff": last - first, "se": se,
            "z": (last - first) / se if se > 0 else float("nan")}


def demo_summary(cfg, out: Path, times: dict[str, float]) -> dict:
    """The figures of a demo run: SFT loss, RL reward per step and its trend, the SFT
    demonstrations' probability before and after RL, the held-out evals (base, SFT, final) and
    their paired tests."""
    from swefleet.app.sft import sft_losses

    summary: dict = {"run": str(out), "times_s": {k: round(v, 1) for k, v in times.items()}}
    if cfg.sft.steps:
        losses = sft_losses(out / "sft") or [float("nan")]
        summary["sft"] = {"steps": cfg.sft.steps, "loss_first": losses[0], "loss_last": losses[-1]}
    metrics = read_jsonl(out / "metrics.jsonl")
    summary["rl"] = {"split": cfg.tasks.split,
                     "reward_per_step": [m["rollout/reward_mean"] for m in metrics],
                     "episodes_per_step": [m.get("rollout/episodes") for m in metrics],
                     "trend": reward_trend(metrics)}
    curve = demonstration_curve(cfg, out)
    if curve:
        p = summary["rl"]["p_demonstrations"] = {"sft": curve[0][1], "per_step": curve}
        if curve[-1][0] == cfg.orchestrator.steps:
            p["rl"] = curve[-1][1]
    from swefleet.app.demo_evals import eval_summary, paired_tests, stage_reports

    reports = stage_reports(cfg, out)
    split, k = cfg.final_eval.split, cfg.final_eval.k
    for stage, key in (("base", "eval_base"), ("sft", "eval_sft"), ("rl", "eval")):
        if stage in reports:
            summary[key] = eval_summary(reports[stage], split, k)
    if len(reports) > 1:
        summary["paired"] = paired_tests(reports)
    return summary


def summary_rows(summary: dict) -> list[tuple[str, str, str]]:
    """(stage, result, time s) rows of the demo's table, in stage order, then the paired tests."""
    from swefleet.app.demo_evals import paired_rows

    times, rows = summary["times_s"], _eval_rows(summary, "eval_base", "eval base")
    if sft := summary.get("sft"):
        rows.append(("sft", (f"{sft['steps']} steps, loss {sft['loss_first']:.3f} -> "
                            f"{sft['loss_last']:.3f}"), _time(times, "sft")))
    rows += _eval_rows(summary, "eval_sft", "eval sft")
    rl = summary["rl"]
    rows.append((f"rl ({rl['split']})", "reward per step " + " ".join(
        f"{r:.2f}" for r in rl["reward_per_step"]), _time(times, "rl")))
    if trend := rl.get("trend"):
        rows.append(("", "reward first {w} -> last {w} steps {first:.3f} -> {last:.3f} "
                         "(diff {diff:+.3f}, SE {se:.3f}, z {z:.1f})".format(
                             w=trend["window"], **trend), ""))
    if (p := rl.get("p_demonstrations")) and "rl" in p:
        rows.append(("", f"P(demonstrations) sft {p['sft']:.2f} -> rl {p['rl']:.2f}", ""))
    return rows + _eval_rows(summary, "eval", "eval") + paired_rows(summary.get("paired", []))


def _eval_rows(summary: dict, key: str, label: str) -> list[tuple[str, str, str]]:
    if not (ev := summary.get(key)):
        return []
    lo, hi = ev.get("ci95") or (float("nan"), float("nan"))
    rows = [(f"{label} ({ev['split']})", (f"success {ev['success_rate']:.2f} (95% CI "
             f"{lo:.2f}-{hi:.2f}) over {ev['n_episodes']} episodes ({ev['n_tasks']} tasks x "
             f"{ev['k']})"), _time(summary["times_s"], key))]
    for split, f in (ev.get("per_split") or {}).items():
        lo, hi = f["ci95"]
        result = (f"split {split}: success {f['success_rate']:.2f} (95% CI {lo:.2f}-{hi:.2f}) "
                  f"over {f['n_episodes']} episodes")
        rows.append(("", result, ""))
    return rows


def _time(times: dict[str, float], stage: str) -> str:
    return f"{times[stage]:.0f}" if stage in times else ""


def write_demo_summary(out: Path, summary: dict) -> None:
    """`demo_summary.json` and `demo_summary.md` (the printed table) in the run folder."""
    from swefleet.rundir import write_text_atomic

    write_text_atomic(out / "demo_summary.json", json.dumps(summary, indent=2) + "\n")
    lines = ["# swefleet demo", "", "| stage | result | time s |", "|---|---|---:|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in summary_rows(summary)]
    lines += ["", f"total {sum(summary['times_s'].values()):.0f} s"]
    write_text_atomic(out / "demo_summary.md", "\n".join(lines) + "\n")


def print_demo_summary(cfg, out: Path, times: dict[str, float]) -> None:
    """One table: the SFT loss, the RL reward per step and its trend (and the SFT
    demonstrations' probability before and after RL), the held-out eval; saved beside it."""
    from rich.table import Table

    from swefleet.console import make_console

    summary = demo_summary(cfg, out, times)
    write_demo_summary(out, summary)
    table = Table(title=f"swefleet demo {out}")
    for col in ("stage", "result", "time s"):
        table.add_column(col)
    for row in summary_rows(summary):
        table.add_row(*row)
    console = make_console()
    console.print(table)
    console.print(f"total {sum(times.values()):.0f}s; outputs in {out} (demo_summary.md)")
