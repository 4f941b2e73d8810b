"""What a person reads at the end of a run (and per step while it runs)."""

from __future__ import annotations

from collections import Counter

from swefleet.orchestrator.loop import CANCELLED_AT_RUN_END

from swefleet.rundir import RunDir, read_jsonl


def print_step(record: dict) -> None:
    from swefleet.console import make_console

    statuses = {k.split("/")[-1]: v for k, v in record.items() if k.startswith("rollout/status/")}
    drops = {k.split("/", 1)[1]: v for k, v in record.items() if k.startswith("drops/")}
    make_console(stderr=True).print(
        f"[bold]step {record['step']}[/] {record['time/step_s']:.1f}s "
        f"(waited {record['time/wait_for_data_s']:.1f}s for data) "
        f"episodes={record['rollout/episodes']} reward={record['rollout/reward_mean']:.2f} "
        f"served=v{record['infer/served_version']} statuses={statuses}"
        + (f" drops={drops}" if drops else "")
    )


def print_summary(run_dir: RunDir, records: list[dict], wall_s: float, served_version: int) -> dict:
    from rich.table import Table

    from swefleet.console import make_console

    episodes = read_jsonl(run_dir.episodes)
    trainer = read_jsonl(run_dir.trainer_metrics)
    table = Table(title=f"swefleet run {run_dir.root}")
    for col in ("step", "time s", "episodes", "reward", "statuses", "loss", "mismatch KL",
                "staleness KL", "stale tokens"):
        table.add_column(col)
    for rec, tr in zip(records, trainer + [{}] * len(records)):
        statuses = ", ".join(
            f"{k.split('/')[-1]}={v}" for k, v in rec.items() if k.startswith("rollout/status/")
        )
        table.add_row(
            str(rec["step"]), f"{rec['time/step_s']:.1f}", str(rec["rollout/episodes"]),
            f"{rec['rollout/reward_mean']:.2f}", statuses,
            _fmt(tr.get("loss")), _fmt(tr.get("mismatch_kl")), _fmt(tr.get("staleness_kl")),
            _share(tr.get("stale_token_fraction")),
        )
    console = make_console()
    console.print(table)
    at_end = [e for e in episodes if e.get("reason") == CANCELLED_AT_RUN_END]
    statuses = Counter(e["status"] for e in episodes if e.get("reason") != CANCELLED_AT_RUN_END)
    totals = [e["timings"].get("total", 0.0) for e in episodes]
    summary = {
        "output_dir": str(run_dir.root),
        "wall_s": wall_s,
        "steps": len(records),
        "policy_versions_served": served_version + 1,
        "final_policy_version": served_version,
        "episodes": len(episodes),
        "statuses": dict(statuses),
        "cancelled_at_run_end": len(at_end),
        "episode_time_mean_s": sum(totals) / len(totals) if totals else 0.0,
        "step_time_s": [r["time/step_s"] for r in records],
    }
    ended = f" + {len(at_end)} cancelled at run end (not scored)" if at_end else ""
    console.print(
        f"{len(episodes)} episodes {dict(statuses)}{ended}; {len(records)} steps; policy v0..v{served_version} "
        f"served; wall {wall_s:.1f}s; outputs in {run_dir.root}"
    )
    return summary


def _fmt(x) -> str:
    """A number, or `-` where there is none (a KL of a step without tokens of its kind)."""
    return "-" if x is None else f"{x:.4g}"


def _share(x) -> str:
    return "-" if x is None else f"{x:.0%}"
