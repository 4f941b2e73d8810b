"""Training plots of an `rl` or `sft` run folder, from its step records: `metrics.jsonl` (the
orchestrator, one record per step) and `trainer_metrics.jsonl` (the trainer, one record per
optimizer step). A key missing from every record means no plot (a KL key the trainer does not
write is simply not a line). The drawing rules: `plots.py`."""

from __future__ import annotations

from pathlib import Path

from swefleet.evals.plots import Band, Line, Plot, line_plot

KL_KEYS = {
    "mismatch_kl": "mismatch KL: samples of the trained policy version (engine vs trainer)",
    "staleness_kl": "staleness KL: samples of older versions (how far the policy moved)",
}
"""trainer_metrics.jsonl keys drawn on the KL plot, whichever exist, and what each line is (a
step without tokens of a kind records null: no point; docs/metrics.md)."""

PHASES = (
    ("metrics", "time/step_s", "step: between two batches handed to the trainer"),
    ("metrics", "time/wait_for_data_s", "orchestrator waiting for finished episodes"),
    ("metrics", "time/weight_sync_s", "weight sync to the inference servers"),
    ("trainer", "step_time_s", "trainer: forward, backward, optimizer"),
    ("trainer", "export_time_s", "trainer: publishing the new weights"),
    ("trainer", "wait_time_s", "trainer: waiting for the batch"),
)
"""Lines of the step-time plot: (source, key, what it is); all in seconds."""


def series(records: list[dict], key: str) -> tuple[list[float], list[float]]:
    """(steps, values) of the records holding a number under `key`."""
    points = [(r["step"], r[key]) for r in records
              if isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)
              and isinstance(r.get("step"), int)]
    return [s for s, _ in points], [v for _, v in points]


def _line(records: list[dict], key: str, label: str) -> Line:
    return Line(label, *series(records, key))


NO_STEPS = "metrics.jsonl has no step record with this key"
NO_TRAINER = "trainer_metrics.jsonl has no record with this key"


def rl_plots(metrics: list[dict], trainer: list[dict], out: Path) -> list[Plot]:
    """The plots of an RL run folder, drawn or not."""
    return [reward_plot(metrics, out), loss_plot(trainer, out), kl_plot(trainer, out),
            entropy_plot(trainer, out), step_time_plot(metrics, trainer, out),
            drop_rate_plot(metrics, out)]


def reward_se_band(metrics: list[dict]) -> Band:
    """Mean reward ± one standard error per step, SE = std / sqrt(n) of the step's scored
    episodes' rewards (`rollout/reward_std`, sample std, and `rollout/reward_n`); a step that
    records no std, or fewer than 2 scored episodes, has no band."""
    points = [(r["step"], r["rollout/reward_mean"],
               r["rollout/reward_std"] / r["rollout/reward_n"] ** 0.5) for r in metrics
              if isinstance(r.get("step"), int) and _number(r.get("rollout/reward_mean"))
              and _number(r.get("rollout/reward_std")) and _number(r.get("rollout/reward_n"))
              and r["rollout/reward_n"] >= 2]
    return Band("± 1 standard error: std of the step's rewards / √(scored episodes)",
                [s for s, _, _ in points], [m - se for _, m, se in points],
                [m + se for _, m, se in points])


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def reward_plot(metrics: list[dict], out: Path) -> Plot:
    n = sorted(r.get("rollout/reward_n", r.get("rollout/episodes", 0)) for r in metrics)
    per_step = f" ({n[len(n) // 2]} scored episodes a step)" if n else ""
    return line_plot(out / "reward.png", "mean reward of each step's scored episodes, with its "
                     "standard-error band", [
        _line(metrics, "rollout/reward_mean", "mean reward (scored episodes)"),
    ], xlabel="step", ylabel="reward", rate=True, title=f"reward per step{per_step}",
        why_empty=NO_STEPS, bands=[reward_se_band(metrics)])


def loss_plot(trainer: list[dict], out: Path) -> Plot:
    return line_plot(out / "loss.png", "the trainer's loss per optimizer step", [
        _line(trainer, "loss", "RL loss (mean over trained tokens)"),
    ], xlabel="optimizer step", ylabel="loss (per trained token)", title="trainer loss",
        why_empty=NO_TRAINER)


def kl_plot(trainer: list[dict], out: Path) -> Plot:
    return line_plot(out / "kl.png", "KL of the sampling vs the trainer's log-probs per step", [
        _line(trainer, key, label) for key, label in KL_KEYS.items()
    ], xlabel="optimizer step", ylabel="KL, k3 estimate (nats per token)",
        title="sampling vs training policy (0: the trainer reproduces the sampler)",
        why_empty=NO_TRAINER)


def entropy_plot(trainer: list[dict], out: Path) -> Plot:
    return line_plot(out / "entropy.png", "the policy's entropy on the trained tokens per step", [
        _line(trainer, "entropy", "mean entropy of the next-token distribution"),
    ], xlabel="optimizer step", ylabel="entropy (nats per token)", title="policy entropy",
        why_empty=NO_TRAINER)


def step_time_plot(metrics: list[dict], trainer: list[dict], out: Path) -> Plot:
    return line_plot(out / "step_time.png", "seconds per step, by phase (phases overlap)", [
        _line(metrics if source == "metrics" else trainer, key, label)
        for source, key, label in PHASES
    ], xlabel="step", ylabel="seconds", title="time per step by phase (phases overlap)",
        why_empty="neither metrics.jsonl nor trainer_metrics.jsonl has a timed step")


def drop_rate_plot(metrics: list[dict], out: Path) -> Plot:
    return line_plot(out / "drop_rate.png", "share of rollouts dropped per step", [
        _line(metrics, "rollout/drop_rate", "dropped / (dropped + used): stale, straggler"),
    ], xlabel="step", ylabel="share of rollouts", rate=True, title="rollouts dropped",
        why_empty=NO_STEPS)


def sft_plots(trainer: list[dict], out: Path) -> list[Plot]:
    """The plots of an SFT run folder, drawn or not."""
    return [line_plot(out / "loss.png", "the SFT loss per optimizer step", [
        _line(trainer, "loss", "cross-entropy on the assistant tokens"),
    ], xlabel="optimizer step", ylabel="loss (nats per trained token)", title="SFT loss",
        why_empty="trainer_metrics.jsonl has no record with a loss")]


def demonstrations_plot(per_step: list[list[float]], out: Path) -> Plot:
    """A demo's `demo_summary.json` `rl.p_demonstrations.per_step`: the SFT demonstrations'
    mean probability under the SFT checkpoint (step 0) and each kept RL version."""
    return line_plot(out / "p_demonstrations.png", "mean probability of the SFT demonstrations "
                     "under each kept checkpoint (noise-free: no sampling)", [
        Line("P(demonstration) under the checkpoint, mean over the first SFT batch",
             [s for s, _ in per_step], [p for _, p in per_step]),
    ], xlabel="RL step (0: the SFT checkpoint)", ylabel="mean probability", rate=True,
        title="demonstrations' probability per step",
        why_empty="demo_summary.json has no per-step probability (no SFT stage, or no kept "
                  "weights)")
