"""`swefleet sft`: supervised fine-tuning on agent trajectories, through the RL trainer process.

Trajectories (the oracle's or the scripted expert's, `[sft] demonstrations`, played through
the agent scaffold in real sandboxes, or a file a user brings: `trainer/sft_data.py`) -> token
samples with the loss on the assistant tokens -> packed batch files (`swefleet/batch.py`) ->
`python -m swefleet.trainer.main` with `trainer.loss = "sft"` -> HF checkpoints
`weights/vNNNNNN/`; the last one is the result.

Layout of the SFT directory (`<output_dir>/sft/` under `swefleet demo`):

```
model/                   the starting model when the project creates it
oracle_episodes.jsonl    the oracle trajectories (reused when the stage runs again)
expert_episodes.jsonl    or the expert's resolved ones (`swefleet/app/sft_expert.py`), with
expert_demonstrations.json   kept / dropped by reason, mean turns and tokens
batches/step_NNNNNN.npz  one batch per optimizer step
weights/vNNNNNN/         the final checkpoint (earlier versions are removed)
trainer_metrics.jsonl    the trainer's per-step record (loss = mean NLL per trained token)
logs/trainer.log
```

A stage whose final checkpoint exists is not run again (a resumed demo skips it).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shutil
import subprocess
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from swefleet.app.stage_bar import StageBar
from swefleet.rundir import RunDir, read_jsonl, write_json_atomic

if TYPE_CHECKING:
    from swefleet.app.config import RunConfig

log = logging.getLogger(__name__)


def run_sft(cfg: RunConfig, sft_dir: Path, restart: bool = False) -> Path:
    """Fine-tune `cfg`'s model for `cfg.sft.steps` steps in `sft_dir` (resumed when it holds the
    same SFT run, `swefleet/fingerprint.py`; `restart` moves an old one aside); returns the
    checkpoint."""
    from swefleet.app.rl import prepare_model
    from swefleet.app.run_fingerprint import claim_sft_dir

    if cfg.sft.steps < 1:
        raise ValueError("sft.steps: must be at least 1 to fine-tune")
    from swefleet.trainer.config import check_lr_schedule

    check_lr_schedule(cfg.trainer, cfg.sft.steps, "sft.steps")
    trained = _trained_task_ids(cfg)  # oracle tasks of a test split: refused, nothing written
    claim_sft_dir(sft_dir, cfg, restart)  # this run's folder, or the same run's: never a mix
    run_dir = RunDir(sft_dir)
    final = run_dir.weights_path(cfg.sft.steps)
    if (final / "config.json").exists():  # nothing to run, nothing written
        log.info("SFT checkpoint %s exists: stage skipped", final)
        return final
    write_json_atomic(run_dir.root / "config.json", cfg.model_dump(mode="json"))
    from swefleet.evals.trained_tasks import record_trained_tasks

    record_trained_tasks(run_dir.root, trained, cfg.sft.trajectories or cfg.tasks.path,
                         cfg.model.path or None)
    model_dir = prepare_model(cfg, run_dir)
    samples = _samples(cfg, run_dir, model_dir)
    _write_batches(cfg, run_dir, samples)
    _train(cfg, run_dir, model_dir)
    _prune_versions(run_dir, cfg.sft.steps)
    from swefleet.evals.run_report import write_run_report

    write_run_report(run_dir.root)  # plots and index.md
    return final


def _trained_task_ids(cfg: RunConfig) -> list[str]:
    """The ids of the tasks SFT trains on: those of a trajectories file's records (`task_id`,
    mini-swe-agent's `instance_id`), else the demonstrations' `[tasks]` (`rl.training_tasks`: a
    test split is refused; expert demonstrations refuse every split but `train`)."""
    if not cfg.sft.trajectories:
        from swefleet.app.rl import training_tasks

        tasks = training_tasks(cfg)
        if cfg.sft.demonstrations == "expert":
            from swefleet.app.sft_expert import check_train_only

            check_train_only(tasks)
        return [t.instance_id for t in tasks]
    from swefleet.trainer.sft_data import _records

    records = _records(Path(cfg.sft.trajectories))
    ids = {r.get("task_id") or r.get("instance_id") for r in records if isinstance(r, dict)}
    return sorted(i for i in ids if isinstance(i, str) and i)


def _samples(cfg: RunConfig, run_dir: RunDir, model_dir: Path) -> list[dict]:
    import json

    from swefleet.agents.chat import ChatML
    from swefleet.agents.tokenizer import Tokenizer
    from swefleet.trainer import sft_data

    tokenizer = Tokenizer.from_dir(model_dir)
    if cfg.sft.trajectories:
        samples = sft_data.load_samples(cfg.sft.trajectories, ChatML(tokenizer),
                                        cfg.sft.min_reward)
    elif cfg.sft.demonstrations == "expert":
        from swefleet.app.sft_expert import expert_episodes

        trajs = expert_episodes(cfg, run_dir.root / "expert_episodes.jsonl", tokenizer)
        _check_fits(cfg, trajs)
        samples = [s for t in trajs for s in sft_data.trajectory_sample(t)]
    else:
        trajs = oracle_episodes(cfg, run_dir.root / "oracle_episodes.jsonl", tokenizer)
        samples = [s for t in trajs for s in sft_data.trajectory_sample(t)]
    vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    sft_data.check_vocab(samples, vocab)
    size = sft_data.stats(samples)
    log.info("SFT data: %d samples, %d tokens, %d trained", size["samples"], size["tokens"],
             size["trained_tokens"])
    return samples


def oracle_episodes(cfg: RunConfig, path: Path, tokenizer) -> list:
    """The oracle trajectories of `cfg`'s tasks, recorded in `path` (read back when there)."""
    from swefleet.agents.export import append_trajectories, read_trajectories

    if path.exists():
        return read_trajectories(path)
    from swefleet.app.rl import prepare_tasks

    tasks = prepare_tasks(cfg)
    trajs = asyncio.run(_oracle(cfg, tasks, tokenizer))
    _check_fits(cfg, trajs)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    append_trajectories(trajs, tmp)
    tmp.replace(path)
    return trajs


async def _oracle(cfg: RunConfig, tasks: list, tokenizer) -> list:
    from swefleet.envs.backends import make_farm
    from swefleet.trainer.sft_oracle import oracle_trajectories

    farm = make_farm(f"{cfg.name}-sft-{uuid.uuid4().hex[:8]}", cfg.envs)
    bar = StageBar("oracle trajectories", len(tasks))
    try:
        await farm.start()
        return await oracle_trajectories(tasks, farm, tokenizer, cfg.agent,
                                         cfg.sft.oracle_concurrency, on_done=lambda t: bar.advance())
    finally:
        bar.close()
        await farm.close()


def _check_fits(cfg: RunConfig, trajs: list) -> None:
    """Warn when a demonstration's reply is longer than the agent may generate in one turn, or
    its turns more than the agent may take."""
    longest = max(len(turn.completion_ids) for t in trajs for turn in t.turns)
    if longest > cfg.agent.max_tokens_per_turn:
        log.warning("a demonstration's reply has %d tokens, more than agent.max_tokens_per_turn"
                    "=%d: the fine-tuned model cannot write it in one turn", longest,
                    cfg.agent.max_tokens_per_turn)
    turns = max(len(t.turns) for t in trajs)
    if turns > cfg.agent.max_steps:
        log.warning("a demonstration takes %d turns, more than agent.max_steps=%d", turns,
                    cfg.agent.max_steps)


def _write_batches(cfg: RunConfig, run_dir: RunDir, samples: list[dict]) -> None:
    from swefleet.trainer.sft_data import step_batches, write_sft_batches

    batches = step_batches(samples, cfg.sft.steps, cfg.sft.batch_size, cfg.sft.seed)
    write_sft_batches(batches, run_dir.batches)


def _train(cfg: RunConfig, run_dir: RunDir, model_dir: Path) -> None:
    """The trainer process on the SFT batches, its progress shown until it exits."""
    from swefleet.orchestrator.trainer_proc import (
        INTERRUPTED_STOP_S,
        stop_trainer,
        trainer_command,
        trainer_env,
    )
    from swefleet.procs import die_with_parent

    trainer = cfg.trainer.model_copy(update={"loss": "sft", "lr": cfg.sft.lr,
                                             "checkpoint_every": None, "batch_timeout_s": 600.0})
    job = {"model": str(model_dir), "batches_dir": str(run_dir.batches),
           "weights_dir": str(run_dir.weights), "start_version": 0, "max_steps": cfg.sft.steps,
           "trainer": trainer.model_dump(mode="json")}
    job_path = run_dir.root / "trainer_job.json"
    write_json_atomic(job_path, job)
    cmd = trainer_command(trainer, job_path, run_dir.logs / "trainer_ranks")
    log_path = run_dir.logs / "trainer.log"
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(cmd, env=trainer_env(trainer), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True,
                                preexec_fn=die_with_parent)  # noqa: PLW1509 - no thread yet
        try:
            _follow(proc, run_dir, cfg.sft.steps)
        finally:  # (still running: interrupted, or the progress display failed)
            stop_trainer(proc, INTERRUPTED_STOP_S)
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace")[-2000:]
        raise RuntimeError(f"SFT trainer exited with code {proc.returncode}:\n{tail}")


def _follow(proc: subprocess.Popen, run_dir: RunDir, steps: int) -> None:
    from swefleet.orchestrator.retention import prune_weights

    bar = StageBar("sft", steps)
    try:
        while proc.poll() is None:
            time.sleep(0.5)
            records = read_jsonl(run_dir.trainer_metrics)
            if records:
                bar.set(len(records), f"sft loss={records[-1]['loss']:.3f}")
                # only the final version is kept: the ones before the newest durable one go now
                prune_weights(run_dir.weights, len(records), keep_last=1)
    finally:
        bar.close()


def _prune_versions(run_dir: RunDir, keep: int) -> None:
    """Remove the intermediate versions: only the final checkpoint is a product."""
    from swefleet.rundir import version_dirs

    for version, path in version_dirs(run_dir.weights).items():
        if version != keep:
            shutil.rmtree(path, ignore_errors=True)


def sft_losses(sft_dir: Path) -> list[float]:
    """The SFT loss of every step (mean NLL per trained token), from the trainer's records."""
    return [r["loss"] for r in read_jsonl(RunDir(sft_dir).trainer_metrics)]


def sft_cli(args: argparse.Namespace) -> int:
    """`swefleet sft --config FILE`: fine-tune and print the checkpoint."""
    from swefleet.app.config import load_config
    from swefleet.rundir import default_output_dir

    cfg = load_config(args.config, args.set)
    if args.trajectories:
        cfg.sft.trajectories = args.trajectories
    if args.steps:
        cfg.sft.steps = args.steps
    out = Path(args.output_dir) if args.output_dir else default_output_dir(f"{cfg.name}-sft")
    from swefleet.app.disk_preflight import check_run_disk

    check_run_disk(cfg, out, sft=True, rl=False)
    final = run_sft(cfg, out, restart=args.restart)
    losses = sft_losses(out) or [float("nan")]
    print(f"SFT {cfg.sft.steps} steps: loss {losses[0]:.3f} -> {losses[-1]:.3f}; "
          f"checkpoint {final}")
    return 0
