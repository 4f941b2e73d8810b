"""Periodic events in a bench run: steps whose time a scheduled side job set, not the pipeline's
rhythm. They are labelled on the per-step rows, kept out of the steady-state statistics and
reported in a row of their own (docs/bench.md, "Periodic events").

A trainer checkpoint (`trainer.checkpoint_every`): after training step s the trainer publishes
version s+1, then starts the checkpoint; its blocking part (waiting for the previous save,
copying the state into host memory) is `checkpoint_blocking_s` of trainer record s. The trainer
takes batch s+1 only after it, so step s+1 (it ends when v(s+2) is served) is long by about that
time: the `checkpoint` step. In the async pipeline the rollouts went on meanwhile, so the batch
of step s+2 is ready early and that step is short: the `after_checkpoint` step.
"""

from __future__ import annotations

from collections.abc import Sequence

CHECKPOINT = "checkpoint"
AFTER_CHECKPOINT = "after_checkpoint"
EVENTS = (CHECKPOINT, AFTER_CHECKPOINT)
"""Event labels, each with its offset from the trainer step after which the checkpoint started:
the step it held up (+1), then the step whose batch was ready early (+2)."""
_OFFSETS = {CHECKPOINT: 1, AFTER_CHECKPOINT: 2}


def checkpoint_steps(trainer: Sequence[dict]) -> list[int]:
    """Trainer steps after which a checkpoint was started: `checkpoint_blocking_s` > 0 (the
    trainer writes 0.0 for the other steps; a save skipped for a full disk blocks nothing)."""
    return sorted(int(r["step"]) for r in trainer if (r.get("checkpoint_blocking_s") or 0) > 0)


def label_events(rows: list[dict], checkpoints: Sequence[int]) -> None:
    """Set `row["event"]` of every step row: an event label, or None. A step both labels would
    claim (checkpoints one step apart) is a `checkpoint` step."""
    for row in rows:
        row["event"] = None
    for event in EVENTS:
        for s in checkpoints:
            step = s + _OFFSETS[event]
            if step < len(rows) and rows[step]["event"] is None:
                rows[step]["event"] = event


def is_steady(row: dict) -> bool:
    """Whether a row after the warm-up counts in the steady-state statistics (no event label;
    rows of reports written before the labels count)."""
    return not row.get("event")


def events_report(rows: Sequence[dict], steady_median: float | None,
                  checkpoint_every: int | None, steps_per_run: int) -> dict:
    """The `periodic_events` entry of a bench report from the post-warm-up rows of all runs:
    per event, its steps' summary and `extra_s` (median - steady median); `net_extra_s_per_checkpoint`
    (what the two labelled steps of a checkpoint add together over two steady steps, mean); and
    why no checkpoint shows when none does."""
    from swefleet.evals.steptime import summarize

    out: dict = {"checkpoint_every": checkpoint_every, "checkpoints": 0, "events": {},
                 "net_extra_s_per_checkpoint": None, "note": None}
    for event in EVENTS:
        times = [r["time_s"] for r in rows if r.get("event") == event]
        s = summarize(times)
        extra = None if s["median_s"] is None or steady_median is None else (
            s["median_s"] - steady_median)
        out["events"][event] = {"n": s["n"], "median_s": s["median_s"], "mean_s": s["mean_s"],
                                "min_s": s["min_s"], "max_s": s["max_s"], "extra_s": extra}
    labelled = [r for r in rows if r.get("event")]
    out["checkpoints"] = out["events"][CHECKPOINT]["n"]
    if out["checkpoints"] and steady_median is not None:
        out["net_extra_s_per_checkpoint"] = sum(
            r["time_s"] - steady_median for r in labelled) / out["checkpoints"]
    if not out["checkpoints"]:
        out["note"] = _no_checkpoint_note(checkpoint_every, steps_per_run)
    return out


def _no_checkpoint_note(checkpoint_every: int | None, steps_per_run: int) -> str:
    if not checkpoint_every:
        return "trainer checkpoints are off (trainer.checkpoint_every unset)"
    if steps_per_run < checkpoint_every + 2:
        return (f"no trainer checkpoint inside the runs: with trainer.checkpoint_every = "
                f"{checkpoint_every} the first one starts after step {checkpoint_every - 1} and "
                f"shows in step {checkpoint_every} and the step after it; runs of "
                f"{steps_per_run} steps need at least {checkpoint_every + 2} to show its cost")
    return ("no trainer checkpoint step after the warm-up (none recorded in "
            "trainer_metrics.jsonl, e.g. skipped for a full disk, or inside the warm-up)")
