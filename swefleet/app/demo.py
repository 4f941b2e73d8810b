"""`swefleet demo`: the whole loop on one config, in stages (what `make run` does).

1. SFT warm start (`[sft]`, skipped when `sft.steps` is 0): the project's model is fine-tuned on
   the oracle's trajectories of the `[tasks]` (the train split), `swefleet/app/sft.py`;
2. RL from that checkpoint (`swefleet rl` on the same config, `swefleet/app/rl.py`): its table
   shows the reward per step on the train tasks;
3. eval of the final RL checkpoint on held-out tasks (`[final_eval]`, `swefleet eval --agent
   model`), reported whatever it is.

Outputs: `<output_dir>/` is the RL run directory; `sft/` and `eval-<split>/` lie inside it. Run
again on the same `--output-dir`, finished stages are skipped (RL resumes where it stopped).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from swefleet.rundir import read_jsonl


def demo_cli(args: argparse.Namespace) -> int:
    from rich.console import Console

    from swefleet.app.config import load_config
    from swefleet.app.rl import run_rl
    from swefleet.app.sft import run_sft
    from swefleet.rundir import default_output_dir

    cfg = load_config(args.config, args.set)
    out = Path(args.output_dir) if args.output_dir else default_output_dir(cfg.name)
    cfg.output_dir = str(out)
    from swefleet.app.disk_preflight import check_run_disk

    check_run_disk(cfg, out, sft=bool(cfg.sft.steps))  # every stage's outputs, before any
    if args.restart:  # every stage starts over; the old run is moved aside whole
        from swefleet.fingerprint import set_aside

        set_aside(out)
    console = Console(stderr=True)
    times: dict[str, float] = {}
    n = 3 if cfg.final_eval.split else 2
    if cfg.sft.steps:
        console.rule(f"[bold]stage 1/{n}: SFT warm start[/] ({cfg.sft.steps} steps on "
                     f"{cfg.sft.trajectories or 'oracle trajectories of the ' + str(cfg.tasks.split) + ' tasks'})")
        t0 = time.monotonic()
        cfg.model.path = str(run_sft(cfg, out / "sft"))
        times["sft"] = time.monotonic() - t0
    console.rule(f"[bold]stage 2/{n}: RL[/] ({cfg.orchestrator.steps} steps from {cfg.model.path or 'the random-init model'})")
    t0 = time.monotonic()
    code = run_rl(cfg)
    times["rl"] = time.monotonic() - t0
    if code != 0:
        return code
    if cfg.final_eval.split:
        console.rule(f"[bold]stage 3/{n}: eval[/] of the final checkpoint on the "
                     f"{cfg.final_eval.split} tasks")
        t0 = time.monotonic()
        code = _final_eval(cfg, args, out)
        times["eval"] = time.monotonic() - t0
    print_demo_summary(cfg, out, times)
    from swefleet.evals.run_report import write_run_report

    write_run_report(out)  # plots and index.md of every stage
    return code


def _final_eval(cfg, args: argparse.Namespace, out: Path) -> int:
    from swefleet.app.eval import run_eval_cli
    from swefleet.app.eval_args import parse_eval_args
    from swefleet.rundir import RunDir

    model = RunDir(out).weights_path(cfg.orchestrator.steps)
    argv = ["--agent", "model", "--model", str(model), "--tasks", cfg.tasks.path,
            "--split", cfg.final_eval.split, "-k", str(cfg.final_eval.k),
            "--config", args.config, "--output-dir", str(_eval_dir(cfg, out))]
    for item in args.set:
        argv += ["--set", item]
    return run_eval_cli(parse_eval_args(argv))


def _eval_dir(cfg, out: Path) -> Path:
    return out / f"eval-{cfg.final_eval.split}"


def _demonstration_likelihood(cfg, out: Path) -> tuple[float, float] | None:
    """Mean probability of the SFT demonstrations (the first SFT batch's samples) under the
    SFT checkpoint and under the final RL one (`evals/likelihood.py`): the policy's progress
    without the sampling noise of a few dozen episodes a step. None without both."""
    from swefleet.evals.likelihood import mean_probability
    from swefleet.rundir import RunDir

    sft = RunDir(out / "sft")
    batch, before = sft.batch_path(0), sft.weights_path(cfg.sft.steps)
    after = RunDir(out).weights_path(cfg.orchestrator.steps)
    if not all(p.exists() for p in (batch, before, after)):
        return None
    return mean_probability(before, batch), mean_probability(after, batch)


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
    demonstrations' probability before and after RL, the held-out eval."""
    from swefleet.app.sft import sft_losses

    summary: dict = {"run": str(out), "times_s": {k: round(v, 1) for k, v in times.items()}}
    if "sft" in times:
        losses = sft_losses(out / "sft") or [float("nan")]
        summary["sft"] = {"steps": cfg.sft.steps, "loss_first": losses[0], "loss_last": losses[-1]}
    metrics = read_jsonl(out / "metrics.jsonl")
    summary["rl"] = {"split": cfg.tasks.split,
                     "reward_per_step": [m["rollout/reward_mean"] for m in metrics],
                     "episodes_per_step": [m.get("rollout/episodes") for m in metrics],
                     "trend": reward_trend(metrics)}
    likelihood = _demonstration_likelihood(cfg, out)
    if likelihood is not None:
        summary["rl"]["p_demonstrations"] = {"sft": likelihood[0], "rl": likelihood[1]}
    report = _eval_dir(cfg, out) / "report.json"
    if "eval" in times and report.exists():
        rep = json.loads(report.read_text())
        summary["eval"] = {"split": cfg.final_eval.split, "k": cfg.final_eval.k,
                           **{key: rep.get(key) for key in ("success_rate", "ci95",
                                                            "n_episodes", "n_tasks", "pass_at_k")}}
    return summary


def summary_rows(summary: dict) -> list[tuple[str, str, str]]:
    """(stage, result, time s) rows of the demo's table."""
    times, rows = summary["times_s"], []
    if sft := summary.get("sft"):
        rows.append(("sft", (f"{sft['steps']} steps, loss {sft['loss_first']:.3f} -> "
                            f"{sft['loss_last']:.3f}"), f"{times['sft']:.0f}"))
    rl = summary["rl"]
    rows.append((f"rl ({rl['split']})", "reward per step " + " ".join(
        f"{r:.2f}" for r in rl["reward_per_step"]), f"{times.get('rl', 0):.0f}"))
    if trend := rl.get("trend"):
        rows.append(("", "reward first {w} -> last {w} steps {first:.3f} -> {last:.3f} "
                         "(diff {diff:+.3f}, SE {se:.3f}, z {z:.1f})".format(
                             w=trend["window"], **trend), ""))
    if p := rl.get("p_demonstrations"):
        rows.append(("", f"P(demonstrations) sft {p['sft']:.2f} -> rl {p['rl']:.2f}", ""))
    if ev := summary.get("eval"):
        lo, hi = ev.get("ci95") or (float("nan"), float("nan"))
        rows.append((f"eval ({ev['split']})", (f"success {ev['success_rate']:.2f} "
                     f"(95% CI {lo:.2f}-{hi:.2f}) over {ev['n_episodes']} episodes "
                     f"({ev['n_tasks']} tasks x {ev['k']})"), f"{times['eval']:.0f}"))
    return rows


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
    from rich.console import Console
    from rich.table import Table

    summary = demo_summary(cfg, out, times)
    write_demo_summary(out, summary)
    table = Table(title=f"swefleet demo {out}")
    for col in ("stage", "result", "time s"):
        table.add_column(col)
    for row in summary_rows(summary):
        table.add_row(*row)
    Console().print(table)
    Console().print(f"total {sum(times.values()):.0f}s; outputs in {out} (demo_summary.md)")
