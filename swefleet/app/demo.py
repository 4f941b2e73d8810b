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


def print_demo_summary(cfg, out: Path, times: dict[str, float]) -> None:
    """One table: the SFT loss, the RL reward per step (and the SFT demonstrations' probability
    before and after RL), the held-out eval."""
    from rich.console import Console
    from rich.table import Table

    from swefleet.app.sft import sft_losses

    table = Table(title=f"swefleet demo {out}")
    for col in ("stage", "result", "time s"):
        table.add_column(col)
    if "sft" in times:
        losses = sft_losses(out / "sft") or [float("nan")]
        table.add_row("sft", f"{cfg.sft.steps} steps, loss {losses[0]:.3f} -> {losses[-1]:.3f}",
                      f"{times['sft']:.0f}")
    rewards = [r["rollout/reward_mean"] for r in read_jsonl(out / "metrics.jsonl")]
    table.add_row(f"rl ({cfg.tasks.split})",
                  "reward per step " + " ".join(f"{r:.2f}" for r in rewards), f"{times['rl']:.0f}")
    likelihood = _demonstration_likelihood(cfg, out)
    if likelihood is not None:
        table.add_row("", "P(demonstrations) sft {:.2f} -> rl {:.2f}".format(*likelihood), "")
    report = _eval_dir(cfg, out) / "report.json"
    if "eval" in times and report.exists():
        rep = json.loads(report.read_text())
        table.add_row(f"eval ({cfg.final_eval.split})",
                      f"success {rep['success_rate']:.2f} over {rep['n_episodes']} episodes "
                      f"({rep['n_tasks']} tasks x {cfg.final_eval.k})", f"{times['eval']:.0f}")
    Console().print(table)
    Console().print(f"total {sum(times.values()):.0f}s; outputs in {out}")
