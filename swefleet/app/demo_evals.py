"""The evals of `swefleet demo` and their paired comparison.

A demo evaluates up to three checkpoints on the same held-out tasks, the same k and the same
agent: the starting model (`[final_eval] base`), the SFT checkpoint (`[final_eval] after_sft`)
and the final RL checkpoint. Each eval lives in its own folder of the run (`eval-<split>-base/`,
`eval-<split>-sft/`, `eval-<split>/`); one whose `report.json` exists is done and is not run
again. Since the three cover the same task attempts, each pair is compared by McNemar's exact
test on the paired attempts (`evals/compare.py`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

#: stage name -> folder suffix (the final eval keeps the historical `eval-<split>`).
EVAL_STAGES = {"base": "-base", "sft": "-sft", "rl": ""}
#: the pairs compared in the summary, in order.
PAIRS = (("base", "sft"), ("sft", "rl"), ("base", "rl"))


def eval_dir(cfg, out: Path, stage: str) -> Path:
    """The folder of one demo eval (`stage` in `EVAL_STAGES`)."""
    from swefleet.envs.tasks import split_label

    return out / f"eval-{split_label(cfg.final_eval.split)}{EVAL_STAGES[stage]}"


def eval_done(cfg, out: Path, stage: str) -> bool:
    """True when that eval's `report.json` is written (a finished eval is never re-run)."""
    return (eval_dir(cfg, out, stage) / "report.json").exists()


def run_stage_eval(cfg, args: argparse.Namespace, out: Path, stage: str, model: str) -> int:
    """`swefleet eval` of `model` as `stage_eval_argv` says."""
    from swefleet.app.eval import run_eval_cli
    from swefleet.app.eval_args import parse_eval_args

    return run_eval_cli(parse_eval_args(stage_eval_argv(cfg, args, out, stage, model)))


def stage_eval_argv(cfg, args: argparse.Namespace, out: Path, stage: str, model: str) -> list[str]:
    """`swefleet eval --agent model` arguments for `model` on `[final_eval]`'s split, k and
    sampling settings, with the demo's config and `--set`s, into `eval_dir(cfg, out, stage)`."""
    if not model:
        raise ValueError(f"demo eval '{stage}': no checkpoint to evaluate (set [model] path or "
                         "name, or turn final_eval.base off)")
    argv = ["--agent", "model", "--model", str(model), "--tasks", cfg.tasks.path,
            "--split", cfg.final_eval.split, "-k", str(cfg.final_eval.k),
            "--config", args.config, "--output-dir", str(eval_dir(cfg, out, stage))]
    if cfg.final_eval.tasks_per_split:
        argv += ["--per-split", str(cfg.final_eval.tasks_per_split)]
    for key in ("temperature", "top_p"):
        value = getattr(cfg.final_eval, key)
        if value is not None:  # before the user's own --set, which wins
            argv += ["--set", f"inference.{key}={value}"]
    for item in args.set:
        argv += ["--set", item]
    return argv


def stage_reports(cfg, out: Path) -> dict[str, dict]:
    """stage -> the eval's report, for every demo eval that finished."""
    reports = {}
    for stage in EVAL_STAGES:
        path = eval_dir(cfg, out, stage) / "report.json"
        if path.exists():
            reports[stage] = json.loads(path.read_text())
    return reports


def eval_summary(report: dict, split: str, k: int) -> dict:
    """The figures of one eval that the demo summary shows (`per_split` for several splits)."""
    keys = ("success_rate", "ci95", "n_episodes", "n_tasks", "pass_at_k", "infra_errors",
            "per_split")
    return {"split": split, "k": k, **{key: report.get(key) for key in keys}}


def paired_tests(reports: dict[str, dict]) -> list[dict]:
    """For each pair of `PAIRS` with both reports: success rates, the delta and the exact test
    `evals/compare.py` chooses (McNemar on paired attempts; Fisher when they do not pair)."""
    from swefleet.evals.compare import compare_reports

    rows = []
    for a, b in PAIRS:
        if a not in reports or b not in reports:
            continue
        row = next(r for r in compare_reports(reports[a], reports[b])["rows"]
                   if r["metric"] == "success_rate")
        rows.append({"a": a, "b": b, "a_rate": row.get("a"), "b_rate": row.get("b"),
                     "delta": row.get("delta"), "test": row.get("test"),
                     "p": row.get("p_value"), "distinguishable": row.get("beyond_noise"),
                     "no_verdict": row.get("no_verdict")})
    return rows


def paired_rows(tests: list[dict]) -> list[tuple[str, str, str]]:
    """Summary-table rows of `paired_tests`."""
    rows = []
    for t in tests:
        if t["a_rate"] is None or t["b_rate"] is None:
            continue
        p = "not tested" if t["p"] is None else f"{t['test']} p {t['p']:.3g}"
        if t.get("no_verdict"):
            p += f" ({t['no_verdict']})"
        change = (f"{t['a_rate']:.3f} -> {t['b_rate']:.3f} "
                  f"({t['b_rate'] - t['a_rate']:+.3f}), {p}")
        rows.append((f"{t['a']} vs {t['b']}", change, ""))
    return rows
