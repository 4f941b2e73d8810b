"""`swefleet rl`: wire the rooms together for one run and clean up whatever happens.

Order: run dir + resolved config -> images -> tasks -> model -> inference fleet (the topology's
servers, supervised: `swefleet/app/servers.py`) -> trainer process -> farm/grader -> RL loop ->
summary. On Ctrl-C or SIGTERM, a crash or normal exit: in-flight episodes are cancelled, the
run's containers removed (environment `swe`), the servers and trainer stopped; the entry point
then prints the one line of an interrupted command (`swefleet.app.interrupt`).
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
import uuid
from pathlib import Path

from swefleet.app.config import RunConfig, check_model_path
from swefleet.rundir import RunDir, default_output_dir, write_json_atomic

log = logging.getLogger(__name__)


def run_rl(cfg: RunConfig, restart: bool = False) -> int:
    """Run (or resume: the same run only, `swefleet/fingerprint.py`) RL; `restart` moves a run
    already in the output directory aside first."""
    from swefleet.app.run_fingerprint import claim_rl_dir
    from swefleet.app.servers import check_launchable
    from swefleet.trainer.config import check_lr_schedule

    check_lr_schedule(cfg.trainer, cfg.orchestrator.steps, "orchestrator.steps")
    check_launchable(cfg)  # a missing vLLM fails before the run directory and the model exist
    trained = training_tasks(cfg, rl=True) if cfg.environment == "swe" else []  # (test: refused)
    out = Path(cfg.output_dir) if cfg.output_dir else default_output_dir(cfg.name)
    from swefleet.app.disk_preflight import check_run_disk

    check_run_disk(cfg, out)  # a run the disk cannot hold fails before it writes anything
    claim_rl_dir(out, cfg, restart)  # this run's folder, or the same run's: never a mix
    resuming = (out / "config.json").exists()
    run_dir = RunDir(out)
    from swefleet.orchestrator.resume import finished

    if resuming and finished(run_dir, cfg.orchestrator.steps):  # no server, trainer or write
        log.info("all %d steps are done in %s: nothing to run", cfg.orchestrator.steps, out)
        return 0
    if resuming:
        log.info("%s holds a run: resuming it", out)
    write_json_atomic(run_dir.root / ("config.resumed.json" if resuming else "config.json"),
                      cfg.model_dump(mode="json"))
    if trained and (cfg.tasks.difficulty_key or cfg.tasks.behaviour_graded_only):
        write_json_atomic(run_dir.root / "task_selection.json", rl_task_selection(cfg)[1])
    if trained:
        from swefleet.evals.trained_tasks import record_trained_tasks

        record_trained_tasks(run_dir.root, [t.instance_id for t in trained], cfg.tasks.path,
                             cfg.model.path or None)
    run_id = f"{cfg.name}-{uuid.uuid4().hex[:8]}"
    log.info("run %s -> %s", run_id, run_dir.root)
    from swefleet.inference.supervisor import NoServersLeft
    from swefleet.orchestrator.loop import RunAborted

    try:  # Ctrl-C or SIGTERM (`swefleet.app.interrupt`): cancelled, cleaned up, re-raised
        return asyncio.run(_run(cfg, run_dir, run_id))
    except (RunAborted, NoServersLeft) as e:
        log.error("run aborted: %s\nstart the same command again to resume from %s", e, out)
        return 1
    finally:
        if cfg.environment == "swe" and cfg.envs.backend == "docker":  # (containers, Docker)
            from swefleet.envs.reaper import remove_run_containers

            n = remove_run_containers(run_id)
            if n:
                log.info("removed %d leftover containers of %s", n, run_id)


def prepare_model(cfg: RunConfig, run_dir: RunDir) -> Path:
    """The starting checkpoint: the configured one, or the project's random-init model."""
    check_model_path(cfg.model)
    if cfg.model.path and (Path(cfg.model.path) / "config.json").exists():
        return Path(cfg.model.path)
    from swefleet.tinymodel import create_tiny_model

    target = Path(cfg.model.path) if cfg.model.path else run_dir.root / "model"
    return create_tiny_model(target, preset=cfg.model.preset, seed=cfg.model.seed)


def prepare_tasks(cfg: RunConfig, select=None):
    """Load the configured tasks (`select` may narrow them) and build their images."""
    tasks = configured_tasks(cfg)
    return with_images(cfg, select(tasks) if select is not None else tasks)


def with_images(cfg: RunConfig, tasks: list) -> list:
    """`tasks`, with the base image and their task images built; no tasks is an error."""
    from swefleet.envs.images import build_base_image
    from swefleet.envs.tasks import prepare_task_images

    if not tasks:
        raise ValueError(_no_tasks(cfg))
    if any(not t.image for t in tasks):  # (tasks naming their images need no Docker here)
        build_base_image(cfg.tasks.base_image)
        prepare_task_images(tasks, cfg.tasks.path, cfg.tasks.base_image)
    return tasks


def configured_tasks(cfg: RunConfig) -> list:
    """The task file's tasks of `tasks.split`, only those graded by behaviour with
    `tasks.behaviour_graded_only`, then at most `tasks.limit` (no images built)."""
    return _split_selection(cfg)[0][: cfg.tasks.limit or None]


def _split_selection(cfg: RunConfig) -> tuple[list, dict]:
    """The split's tasks, only those graded by behaviour with `tasks.behaviour_graded_only`
    (before `limit`), and what that dropped ({} without it)."""
    from swefleet.envs.behaviour import graded_by_behaviour
    from swefleet.envs.tasks import load_tasks

    tasks = load_tasks(cfg.tasks.path, split=cfg.tasks.split)
    if not cfg.tasks.behaviour_graded_only:
        return tasks, {}
    graded = [t for t in tasks if graded_by_behaviour(t)]
    return graded, {"behaviour_graded_only": True, "in_split": len(tasks),
                    "dropped_constant_checks_only": len(tasks) - len(graded)}


def rl_task_selection(cfg: RunConfig) -> tuple[list, dict]:
    """RL's tasks (`configured_tasks`, then `[tasks]`'s difficulty skips), and what was
    skipped: by those and by `tasks.behaviour_graded_only` (the task file read once)."""
    from swefleet.envs.difficulty import select_by_difficulty

    tasks, info = _split_selection(cfg)
    t = cfg.tasks
    tasks = tasks[: t.limit or None]
    if not t.difficulty_key:
        return tasks, info
    kept, counts = select_by_difficulty(tasks, t.difficulty_key, t.skip_always_solved,
                                        t.skip_never_solved)
    info |= {"difficulty_key": t.difficulty_key, "tasks": len(tasks), "kept": len(kept),
             "skipped_always_solved": counts["always_solved"],
             "skipped_never_solved": counts["never_solved"], "unmeasured": counts["unmeasured"]}
    return kept, info


def training_tasks(cfg: RunConfig, rl: bool = False) -> list:
    """The configured tasks (no images built), refused with one line when some are of a test
    split and `tasks.allow_test_split` is off: a training run never takes an evaluation set by
    default. `rl`: after the difficulty skips (`rl_task_selection`)."""
    from swefleet.envs.tasks import is_evaluation_split

    tasks, info = rl_task_selection(cfg) if rl else (configured_tasks(cfg), {})
    if rl:
        if "dropped_constant_checks_only" in info:
            log.info("tasks graded by behaviour only: dropped %d of %d (constant checks only)",
                     info["dropped_constant_checks_only"], info["in_split"])
        if "difficulty_key" in info:
            log.info("tasks by %s: %d of %d kept; skipped %d always solved, %d never solved; "
                     "%d unmeasured (kept)", info["difficulty_key"], info["kept"], info["tasks"],
                     info["skipped_always_solved"], info["skipped_never_solved"],
                     info["unmeasured"])
        if not tasks and info.get("tasks"):
            raise ValueError(f"{cfg.tasks.path}: every task was skipped by its recorded pass "
                             f"rate ({info}); relax tasks.skip_always_solved / skip_never_solved")
    if not tasks:
        raise ValueError(_no_tasks(cfg))
    test = [t for t in tasks if is_evaluation_split(t.split)]
    if test and not cfg.tasks.allow_test_split:
        shown = ", ".join(t.instance_id for t in test[:3]) + (", ..." if len(test) > 3 else "")
        splits = "', '".join(sorted({t.split for t in test}))
        raise ValueError(
            f"{cfg.tasks.path}: {len(test)} of the {len(tasks)} tasks to train on are of split "
            f"'{splits}' ({shown}): an evaluation set; pick training tasks (tasks.split) or set "
            "tasks.allow_test_split = true to train on them anyway")
    return tasks


def _no_tasks(cfg: RunConfig) -> str:
    """Why the configured task set is empty, with the splits the source does have."""
    from swefleet.envs.tasks import load_tasks

    splits = sorted({t.split for t in load_tasks(cfg.tasks.path)}) if cfg.tasks.split else []
    has = f"; its tasks are of split {', '.join(splits)}" if splits else ""
    only = ", graded by behaviour (tasks.behaviour_graded_only)" \
        if cfg.tasks.behaviour_graded_only else ""
    return f"no tasks in {cfg.tasks.path} (split={cfg.tasks.split}{only}){has}"


async def _run(cfg: RunConfig, run_dir: RunDir, run_id: str) -> int:
    from contextlib import AsyncExitStack

    from swefleet.agents.config import fit_context_budget
    from swefleet.agents.tokenizer import Tokenizer
    from swefleet.app.servers import open_fleet
    from swefleet.orchestrator.loop import RLLoop
    from swefleet.orchestrator.resume import (
        find_resume_point,
        remove_torn_batches,
        settle_unfinished,
    )
    from swefleet.orchestrator.summary import print_step, print_summary
    from swefleet.orchestrator.trainer_proc import (
        INTERRUPTED_STOP_S,
        TrainerMetricsTail,
        start_trainer,
        stop_trainer,
        trainer_problem,
    )
    from swefleet.orchestrator.weight_sync import weight_sync_job
    from swefleet.sinks import MetricSinks

    t0 = time.monotonic()
    _install_signal_handlers()
    async with AsyncExitStack() as stack:
        tasks = await asyncio.to_thread(_tasks_for, cfg)
        model_dir = await asyncio.to_thread(prepare_model, cfg, run_dir)
        settled = settle_unfinished(run_dir)  # episodes a killed run never finished
        if settled:
            log.info("%d episodes of the previous run never finished: recorded as cancelled",
                     settled)
        torn = remove_torn_batches(run_dir)
        if torn:
            log.info("removed %d torn batch write(s) of the previous run: %s", len(torn),
                     ", ".join(torn))
        resume = find_resume_point(run_dir)
        if not resume.fresh:
            log.info("resuming at step %d, policy v%d, %d finished groups not yet trained on",
                     resume.step, resume.version, len(resume.pending))
        log.info("%d tasks, model %s (setup %.1fs)", len(tasks), model_dir, time.monotonic() - t0)
        if resume.version >= cfg.orchestrator.steps:
            log.info("all %d steps are done in %s", cfg.orchestrator.steps, run_dir.root)
            return 0
        # spawned from the main thread: the servers die with this process (die_with_parent);
        # metrics scraped by default (infer/kv_hit_rate per step)
        fleet, supervisor = await open_fleet(cfg, model_dir, run_dir.logs, stack,
                                             scrape_metrics=True, run_dir=run_dir)
        trainer = start_trainer(cfg.trainer, cfg.orchestrator.steps, run_dir, model_dir,
                                await weight_sync_job(cfg.inference, cfg.trainer.device,
                                                      fleet, run_dir))
        # a run that ends gives the trainer 20 s to finish its step, an interrupted one 2 s
        stack.push(lambda *exc: stop_trainer(trainer, INTERRUPTED_STOP_S if exc[0] else 20.0))
        trainer_metrics = TrainerMetricsTail(run_dir)
        if resume.version:
            await supervisor.update_weights(resume.version, run_dir.weights_path(resume.version))
        tokenizer = Tokenizer.from_dir(model_dir)
        agent = fit_context_budget(cfg.agent, await fleet.max_model_len())
        from swefleet.journal import Journal

        journal = Journal()  # the run's records, written off the event loop
        stack.callback(journal.close)
        env_metrics: list = []  # per-step figures of the environment (sandboxes held)
        rollout, branch_points = await _environment(cfg, agent, run_id, fleet, tokenizer,
                                                    stack, run_dir, journal, env_metrics)
        sinks = MetricSinks.from_config(cfg.orchestrator.sinks, run_dir.root, cfg.name,
                                        cfg.model_dump(mode="json"))
        stack.callback(sinks.close)

        def on_step(record: dict) -> None:
            print_step(record)
            sinks.write(record)

        loop = RLLoop(cfg.orchestrator, rollout, tasks, run_dir, supervisor.update_weights,
                      on_step=on_step, health=lambda: trainer_problem(trainer, run_dir),
                      resume=resume, journal=journal, branch_points=branch_points,
                      extra_metrics=lambda: {**fleet.metrics(), **supervisor.metrics(),
                                             **{k: v for f in env_metrics for k, v in f().items()},
                                             **trainer_metrics(), **_disk_metrics(run_dir)})
        records = await supervisor.guard(loop.run())
        summary = print_summary(run_dir, records, time.monotonic() - t0,
                                served_version=loop.state.served_version)
        summary["servers"] = _server_counts(fleet)
        write_json_atomic(run_dir.root / "summary.json", summary)
    from swefleet.evals.run_report import write_run_report

    await asyncio.to_thread(write_run_report, run_dir.root)  # plots and index.md
    return 0


def _disk_metrics(run_dir: RunDir) -> dict[str, float]:
    """`disk/free_gb`: free space of the run directory's filesystem."""
    from swefleet.diskspace import GB, free_bytes

    return {"disk/free_gb": free_bytes(run_dir.root) / GB}


def _server_counts(fleet) -> dict[str, dict]:
    """Per server URL: the policy version it serves and its request counts over the run."""
    keys = ("policy_version", "attempts", "completed", "failures", "tokens")
    return {url: {k: snap[k] for k in keys} for url, snap in fleet.server_metrics().items()}


def _tasks_for(cfg: RunConfig):
    if cfg.environment == "token_target":
        from swefleet.orchestrator.toy import toy_tasks

        return toy_tasks(cfg.toy)
    return with_images(cfg, rl_task_selection(cfg)[0])


async def _environment(cfg: RunConfig, agent, run_id: str, fleet, tokenizer, stack,
                       run_dir: RunDir, journal=None, step_metrics: list | None = None):
    """The rollout function of the configured environment and where its groups start (None:
    fresh; `orchestrator.branching`), its resources on `stack`; appends the environment's
    per-step metric functions to `step_metrics`."""
    if cfg.environment == "token_target":
        from swefleet.orchestrator.toy import token_target_rollout

        if cfg.orchestrator.branching.enabled:
            raise ValueError('orchestrator.branching needs environment = "swe"')
        return token_target_rollout(fleet, tokenizer, cfg.toy), None
    from swefleet.envs.backends import make_farm, make_grader
    from swefleet.orchestrator.rollout import RolloutContext, swe_rollout

    farm = make_farm(run_id, cfg.envs)
    stack.push_async_callback(farm.close)
    await farm.start()  # reaps containers of dead runs first
    if step_metrics is not None:
        step_metrics.append(farm.stats.step_metrics)
    grader = make_grader(run_id, cfg.envs)
    stack.callback(grader.close, abandon=True)  # shutdown never waits for queued grades
    from swefleet.orchestrator.resume import record_started

    ctx = RolloutContext(farm=farm, grader=grader, model=fleet, tokenizer=tokenizer,
                         agent=agent, on_start=lambda t: record_started(run_dir, t, journal),
                         gold_canary=_gold_canary(cfg, run_id, stack, step_metrics))
    if not cfg.orchestrator.branching.enabled:
        return swe_rollout(ctx), None
    from swefleet.orchestrator.branching import Brancher

    brancher = Brancher(ctx, cfg.orchestrator.branching, run_dir, seed=cfg.orchestrator.seed)
    if step_metrics is not None:
        step_metrics.append(brancher.stats.step_metrics)
    return brancher.recording(swe_rollout(ctx)), brancher.point


def _gold_canary(cfg: RunConfig, run_id: str, stack, step_metrics: list | None):
    """The live gold canary on a one-slot grader of its own (`envs.grading.gold_canary_rate`;
    None when 0), its metrics appended to `step_metrics`."""
    rate = cfg.envs.grading.gold_canary_rate
    if not rate:
        return None
    from swefleet.envs.backends import make_grader
    from swefleet.orchestrator.gold_canary import GoldCanary

    one_slot = cfg.envs.grading.model_copy(update={"parallelism": 1})
    grader = make_grader(run_id, cfg.envs.model_copy(update={"grading": one_slot}))
    stack.callback(grader.close, abandon=True)  # gold grades in flight end with the run
    canary = GoldCanary(grader, rate, seed=cfg.orchestrator.seed)
    if step_metrics is not None:
        step_metrics.append(canary.step_metrics)
    return canary


def _install_signal_handlers() -> None:
    """SIGUSR1 logs every task's stack (what is the run waiting for?). (Ctrl-C and SIGTERM
    cancel the run's main task: `swefleet.app.interrupt`, installed by the entry point.)"""
    asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, _dump_tasks)


def _dump_tasks() -> None:
    import io

    buf = io.StringIO()
    for task in asyncio.all_tasks():
        task.print_stack(limit=8, file=buf)
    log.warning("SIGUSR1: %d tasks\n%s", len(asyncio.all_tasks()), buf.getvalue())
