"""Small run folders shaped like the real writers' (orchestrator/loop.py `_step_record`,
trainer/main.py `_log_step`, app/eval.py `_record`, evals/report.py `build_report`), for the
run-report tests: an RL run, an SFT stage, an eval, and a demo folder holding them all, with the
files each command writes beside its records (`everything=True`: the optional ones too)."""

from __future__ import annotations

import json
from pathlib import Path

from swefleet.evals.report import build_report

from swefleet.types import EpisodeStatus, Trajectory, Turn

REWARDS = [0.25, 0.5, 0.75]


def _jsonl(path: Path, records: list) -> None:
    path.write_text("".join((r.model_dump_json() if hasattr(r, "model_dump_json")
                             else json.dumps(r)) + "\n" for r in records))


def step_record(step: int, reward: float) -> dict:
    """An orchestrator step record as `RLLoop._step_record` writes it (8 episodes a step)."""
    return {
        "step": step, "time/step_s": 8.0 + 0.1 * step, "time/wait_for_data_s": 6.5,
        "time/weight_sync_s": 0.3, "time/since_start_s": 8.0 * (step + 1),
        "infer/served_version": step, "batch/samples": 8, "drops/straggler": step,
        "drops/step": 1 if step else 0, "rollout/drop_rate": 1 / 9 if step else 0.0,
        "rollout/episodes": 8, "rollout/reward_mean": reward, "rollout/pass_rate": reward,
        "rollout/reward_std": (reward * (1 - reward) * 8 / 7) ** 0.5, "rollout/reward_n": 8,
        "rollout/turns_mean": 3.0, "rollout/tokens_mean": 410.0, "rollout/latency_p50_s": 5.0,
        "rollout/latency_p99_s": 9.0, "rollout/off_policy_rate": 0.0,
        "rollout/version_skew": {"0": 8}, "rollout/status/resolved": int(8 * reward),
        "rollout/status/format_errors": 8 - int(8 * reward), "rollout/grade_tampered": 0,
        "rollout/grade_flagged": 0, "rollout/phase_sandbox_mean_s": 0.4,
        "rollout/phase_model_mean_s": 3.0, "rollout/phase_env_mean_s": 0.5,
        "rollout/phase_grading_mean_s": 2.0, "cost/minutes_per_rollout": 0.02,
        "cost/money_per_rollout": 0.0, "cost/currency": "USD", "infer/requests": 24 * (step + 1),
        **({"trainer/loss": 0.1, "trainer/idle_fraction": 0.5} if step else {}),
    }


def trainer_record(step: int, loss: float, kl_keys: tuple[str, ...] = ("mismatch_kl",)) -> dict:
    """A trainer step record as `trainer/main.py` `_log_step` writes it."""
    return {
        "step": step, "policy_version": step + 1, "time": 1.7e9 + step, "loss": loss,
        "ratio_mean": 1.0, "clip_fraction": 0.0, "tis_fraction": 0.0,
        **{key: 0.001 * (step + 1) for key in kl_keys}, "entropy": 2.5 - 0.1 * step,
        "grad_norm": 3.0, "skipped_update": False, "n_samples": 8, "n_tokens": 4000,
        "n_trained_tokens": 900, "masked_fraction": 0.225, "padding_fraction": 0.0, "mfu": None,
        "tokens_per_s": 2000.0, "step_time_s": 2.0, "export_time_s": 0.4, "wait_time_s": 5.0,
        "sample_version_min": step, "sample_version_max": step, "max_staleness": 0,
        "lr": 5e-4, "peak_memory_gib": None, "peak_rss_gib": 1.2,
        "batch_meta": {"step": step, "n_samples": 8, "episode_ids": []},
    }


def episode(i: int, status: EpisodeStatus, reward: float | None, reason: str = "") -> Trajectory:
    turns = [Turn(prompt_ids=[1, 2], completion_ids=[3], logprobs=[-0.5], policy_version=0)]
    return Trajectory(episode_id=f"e{i}", task_id=f"t{i % 2}", group_id=f"t{i % 2}-g",
                      turns=turns, status=status, reason=reason, reward=reward,
                      timings={"total": 4.0})


def write_rl(out: Path, *, trainer: list[dict] | None = None, steps: int = 3) -> Path:
    """An RL run folder of `steps` steps (the trainer's records: `trainer`, default one per
    step with a mismatch KL)."""
    for sub in ("batches", "weights/v000001", "logs"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    (out / "config.json").write_text(json.dumps({"name": "fixture", "orchestrator": {
        "steps": steps, "groups_per_step": 1, "rollouts_per_task": 8}}))
    (out / "trainer_job.json").write_text(json.dumps({"trainer": {"loss": "dapo"}}))
    _jsonl(out / "metrics.jsonl", [step_record(s, REWARDS[s % 3]) for s in range(steps)])
    _jsonl(out / "trainer_metrics.jsonl",
           [trainer_record(s, 0.05 - 0.01 * s) for s in range(steps)]
           if trainer is None else trainer)
    _jsonl(out / "weights.jsonl", [{"version": s + 1, "served_at_s": 8.0 * (s + 1),
                                    "sync_s": 0.3} for s in range(steps)])
    _jsonl(out / "drops.jsonl", [{"reason": "straggler", "n": 1, "episode_ids": ["e9"]}])
    _jsonl(out / "episodes.jsonl", [episode(0, EpisodeStatus.resolved, 1.0),
                                    episode(1, EpisodeStatus.format_errors, 0.0)])
    _jsonl(out / "episodes.started.jsonl", [{"episode_id": f"e{i}", "task_id": f"t{i % 2}",
                                             "group_id": f"t{i % 2}-g"} for i in range(2)])
    (out / "summary.json").write_text(json.dumps({"steps": steps, "episodes": 2}))
    return out


def write_sft(out: Path, steps: int = 4) -> Path:
    """An SFT stage folder as `swefleet sft` leaves it."""
    for sub in ("batches", f"weights/v{steps:06d}", "logs", "model"):
        (out / sub).mkdir(parents=True, exist_ok=True)
    (out / "trainer_job.json").write_text(json.dumps({"trainer": {"loss": "sft"},
                                                      "max_steps": steps}))
    _jsonl(out / "oracle_episodes.jsonl", [episode(0, EpisodeStatus.resolved, 1.0)])
    _jsonl(out / "trainer_metrics.jsonl",
           [{**trainer_record(s, 6.9 / (s + 1)), "mismatch_kl": 0.0} for s in range(steps)])
    return out


def eval_records(outcomes: dict[str, list[bool | None]]) -> list[dict]:
    """Eval episode records (`app/eval.py` `_record`); None: an infra error."""
    return [{"task_id": task, "attempt": a, "episode_id": f"{task}-{a}",
             "status": {True: "resolved", False: "unresolved", None: "infra_error"}[r],
             "reason": "", "resolved": r, "tokens": 300, "turns": 3, "wall_s": 6.0,
             "model_patch": "", "image_user": "", "grade": None}
            for task, outs in outcomes.items() for a, r in enumerate(outs)]


def write_eval(out: Path, outcomes: dict[str, list[bool | None]]) -> Path:
    """An eval folder: episodes, eval_run.json, report.json/.md, SWE-bench files, logs."""
    k = max(len(o) for o in outcomes.values())
    (out / "logs" / "run_evaluation").mkdir(parents=True)
    (out / "trajectories").mkdir()
    records = eval_records(outcomes)
    _jsonl(out / "episodes.jsonl", records)
    (out / "config.json").write_text("{}")
    (out / "eval_run.json").write_text(json.dumps({
        "run_id": "r1", "model_name_or_path": "runs/demo/weights/v000003", "agent": "model",
        "k": k}))
    (out / "report.json").write_text(json.dumps(build_report(records, k)))
    (out / "report.md").write_text("# swefleet eval\n")
    (out / "predictions.jsonl").write_text("")
    (out / "runs__demo__weights__v000003.r1.json").write_text("{}")  # SWE-bench's run report
    return out


def write_demo(out: Path, *, all_evals: bool = False) -> Path:
    """A finished demo folder: the RL run with its SFT and held-out eval stages inside, its
    summary and stage times; `all_evals`: the evals of the starting model and of the SFT
    checkpoint too (`[final_eval] base`, `after_sft`)."""
    write_rl(out)
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "final_eval": {"split": "heldout"}}))
    write_sft(out / "sft")
    evals = ["eval-heldout-base", "eval-heldout-sft", "eval-heldout"] if all_evals else [
        "eval-heldout"]
    for name in evals:
        write_eval(out / name, {"h1": [False, False], "h2": [False, False]})
    (out / "demo_times.json").write_text(json.dumps({"sft": 16.0, "rl": 111.0, "eval": 6.0}))
    curve = [[0, 0.21], [1, 0.3], [2, 0.36]]
    (out / "demo_summary.json").write_text(json.dumps(
        {"run": str(out), "rl": {"p_demonstrations": {"sft": 0.21, "rl": 0.36,
                                                      "per_step": curve}}}))
    (out / "demo_summary.md").write_text("# swefleet demo\n")
    return out


def _touch(out: Path, *names: str) -> None:
    """Files (directories: a name ending in "/") with placeholder content."""
    for name in names:
        path = out / name
        if name.endswith("/"):
            path.mkdir(parents=True, exist_ok=True)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("{}\n")


RL_EXTRAS = ("fingerprint.json", "config.resumed.json", "trained_tasks.json",
             "batches/step_000000.npz", "trainer_checkpoints/step_000003/", "model/",
             "prefixes.jsonl", "task_selection.json", "tensorboard/", "wandb/", "slurm/",
             "replay_check.json", "replays/e0.json", "mini-swe-agent/")
"""What else `swefleet rl` (with its options), `swefleet replay` and `swefleet export` write into
an RL run folder."""
SFT_EXTRAS = ("config.json", "fingerprint.json", "trained_tasks.json", "expert_episodes.jsonl",
              "expert_demonstrations.json", "expert_dropped_episodes.jsonl",
              "batches/step_000000.npz", "model/", "mini-swe-agent/")
EVAL_EXTRAS = ("fingerprint.json", "episodes.retried.jsonl", "mini-swe-agent/",
               "replay_check.json", "replays/", "trajectories/t0/0.json")


def write_everything(out: Path, kind: str) -> Path:
    """The fixture folder of `kind` ("rl", "sft", "eval", "demo") with every optional file its
    command, replay and export may write."""
    if kind == "rl":
        write_rl(out)
    elif kind == "sft":
        write_sft(out)
    elif kind == "eval":
        write_eval(out, {"a": [True, False], "b": [False, True]})
    else:
        write_demo(out, all_evals=True)
    extras = {"rl": RL_EXTRAS, "demo": RL_EXTRAS, "sft": SFT_EXTRAS, "eval": EVAL_EXTRAS}[kind]
    _touch(out, *extras)
    return out
