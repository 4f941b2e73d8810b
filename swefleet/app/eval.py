"""`swefleet eval`: run a policy on every task k times, grade in fresh containers, report.

Resumable: each finished episode is appended to `DIR/episodes.jsonl`; a restarted eval skips the
(task, attempt) pairs already there. Policies: `oracle` (gold patch), `empty` (no change),
`predictions` (the patches of a SWE-bench predictions file, graded here) and `model` (the agent
against a served checkpoint: the config's inference fleet on `--model DIR` (embedded or vLLM
servers, supervised), or `--server URL` (repeatable), each checked at startup to answer GET
/v1/models and to serve `inference.model_name`, else a config error, exit code 2, naming the
served models: `evals.served`). `--api chat` runs the agent at the message level against one
OpenAI-compatible chat endpoint instead (`agents.chat_loop`, `inference.chat_client`; startup
check: `evals.chat_endpoint`); the report then names the API mode, model and endpoint.

SWE-bench harness conventions (docs/eval.md): `--instance-ids`/`--filter`/`--slice` pick the
instances (`evals.select`), `--max-workers` runs that many at a time, `--timeout` bounds each
episode and each grading run, and every episode leaves SWE-bench's per-instance logs under
`logs/run_evaluation/<run_id>/<model>/<instance_id>/` (`evals.harness_logs`) and its full
trajectory under `trajectories/` (exportable: `evals.export`). Restarting on the same directory
re-runs the episodes whose last status was `infra_error` (`evals.resume`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import shutil
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from swefleet.evals.chat_endpoint import api_key_from_env, chat_model_name, serving_fields
from swefleet.evals.export import EVAL_META, trajectory_path
from swefleet.evals.harness_logs import instance_log_dir, write_instance_logs
from swefleet.evals.report import behaviour_fields, build_report, report_markdown, split_fields
from swefleet.evals.resume import drop_retryable
from swefleet.evals.select import select_by_flags
from swefleet.evals.served import check_served_model
from swefleet.evals.swebench_report import dataset_ids, write_swebench_outputs
from swefleet.evals.trained_tasks import overlap_fields, unknown_overlap
from swefleet.rundir import append_jsonl, read_jsonl, write_json_atomic
from swefleet.types import EpisodeStatus, GradeCause, GradeStatus, Task, Trajectory

log = logging.getLogger(__name__)


def run_eval_cli(args: argparse.Namespace) -> int:
    from swefleet.app.config import load_config
    from swefleet.app.rl import prepare_tasks
    from swefleet.app.run_fingerprint import claim_eval_dir
    from swefleet.envs.reaper import remove_run_containers

    cfg = load_config(args.config, harness_overrides(args) + args.set, servers=args.server)
    cfg.tasks.path, cfg.tasks.split, cfg.tasks.limit = args.tasks, args.split, None
    if args.agent == "model" and args.api == "chat":  # before any task: a wrong name fails
        args.model = chat_model_name(args.server[0], args.model or cfg.inference.model_name,
                                     api_key_from_env(cfg.inference.api_key_env),
                                     cfg.inference.connect_timeout_s)
    elif args.agent == "model":  # before any task: a wrong name or a missing vLLM fails at once
        from swefleet.app.servers import check_launchable

        check_launchable(cfg)
        for url in args.server:
            check_served_model(url, cfg.inference.model_name, cfg.inference.connect_timeout_s)
    out = Path(args.output_dir)
    fresh = not out.exists()
    claim_eval_dir(out, args, cfg)  # this eval's folder, or the same eval's: never a mix
    (out / "config.json").write_text(cfg.model_dump_json(indent=2))  # what this eval ran with
    run_id = f"eval-{uuid.uuid4().hex[:8]}"  # labels this process's containers
    layout = _Layout(out, log_run_id(args, out), model_name_for(args))
    try:
        from swefleet.envs.containers import docker_client
        from swefleet.envs.reaper import reap_dead_runs

        if cfg.envs.backend == "docker" and not cfg.envs.hosts:  # (bwrap boxes die with
            reap_dead_runs(docker_client())  # their process; a farm over hosts reaps each)
        tasks = prepare_tasks(cfg, _selector(args))
        write_eval_meta(args, layout, tasks)
        drop_retryable(out / "episodes.jsonl")
        asyncio.run(_eval(cfg, args, tasks, layout, run_id))
    except BaseException:
        episodes = out / "episodes.jsonl"
        if fresh and not (episodes.is_file() and episodes.stat().st_size):
            shutil.rmtree(out, ignore_errors=True)  # ended before any episode: no folder left
        raise
    finally:
        if cfg.envs.backend == "docker":
            remove_run_containers(run_id)
    selected = {t.instance_id for t in tasks}  # the report covers this invocation's instances
    records = [r for r in read_jsonl(out / "episodes.jsonl") if r["task_id"] in selected]
    report = build_report(records, args.k)
    report.update(split_fields(records, {t.instance_id: t.split for t in tasks}, args.k))
    report.update(behaviour_fields(tasks))
    report.update(cost_fields(report, cfg.orchestrator))
    if args.agent == "model":
        report.update(serving_fields(args.api, args.model, args.server,
                                      cfg.inference.resolved_kind))
    if args.agent == "model" and args.api == "tokens":  # was it trained on the tasks?
        report.update(overlap_fields(args.model, selected))
    elif args.agent == "model":
        report.update(unknown_overlap(selected, "a chat endpoint: the checkpoint behind it, "
                                      "and so what it was trained on, is not known here"))
    elif args.agent == "predictions":
        report.update(unknown_overlap(selected, "predictions made elsewhere: the model behind "
                                      "them is not known here"))
    write_json_atomic(out / "report.json", report)
    write_swebench_outputs(records, out, layout.run_id, layout.model_name,
                           dataset_ids(args.tasks, args.split, args.instance_ids))
    (out / "report.md").write_text(report_markdown(report))
    if args.export_trajectories:
        from swefleet.evals.export import export_mini_swe_agent

        export_mini_swe_agent(out)
    from swefleet.evals.run_report import write_run_report

    write_run_report(out)  # plots and index.md
    print(report_markdown(report))
    return 0


@dataclass(frozen=True)
class _Layout:
    """Where one eval's files go."""

    out: Path
    run_id: str
    """SWE-bench's run id: names `logs/run_evaluation/<run_id>/`."""
    model_name: str
    """`model_name_or_path` of the predictions and the log paths."""


def harness_overrides(args: argparse.Namespace) -> list[str]:
    """`--max-workers` and `--timeout` as config overrides (an explicit `--set` comes after
    them, so it wins): N instances at a time (episodes and sandboxes); T seconds per episode
    and per grading run."""
    sets = []
    if args.max_workers:
        sets += [f"orchestrator.max_concurrent_episodes={args.max_workers}",
                 f"envs.max_concurrent={args.max_workers}"]
    if args.timeout:
        sets += [f"agent.episode_timeout_s={args.timeout}",
                 f"envs.grading.timeout_s={args.timeout}"]
    return sets


def log_run_id(args: argparse.Namespace, out: Path) -> str:
    """`--run-id`, else the one this output dir was run with, else the dir's name."""
    if args.run_id:
        return args.run_id
    meta = out / EVAL_META
    return json.loads(meta.read_text())["run_id"] if meta.is_file() else out.resolve().name


def model_name_for(args: argparse.Namespace) -> str:
    """`model_name_or_path` of the outputs: the predictions' own (when they agree on one), the
    model dir, the servers, or the agent's name."""
    if args.agent == "predictions" and args.predictions:
        names = {p.model_name_or_path for p in load_predictions_for(args).values()}
        if len(names) == 1 and (name := names.pop()) != "unknown":
            return name
    return args.model or ",".join(args.server) or args.agent


def write_eval_meta(args: argparse.Namespace, layout: _Layout, tasks: list[Task]) -> None:
    """`eval_run.json`: what `swefleet export` and a resumed eval need to know about the run."""
    source = Path(args.tasks)
    write_json_atomic(layout.out / EVAL_META, {
        "run_id": layout.run_id, "model_name_or_path": layout.model_name, "agent": args.agent,
        "model": str(Path(args.model).resolve()) if args.model and args.api == "tokens"
        else args.model, "api": args.api,
        "tasks": str(source.resolve()) if source.exists() else args.tasks,
        "split": args.split, "k": args.k, "instance_ids": [t.instance_id for t in tasks]})


def _selector(args: argparse.Namespace):
    """The task filter of this eval: the predictions' instances, then the selection flags."""
    preds = load_predictions_for(args) if args.agent == "predictions" else None

    def select(tasks: list[Task]) -> list[Task]:
        if preds is not None:
            tasks = only_predicted(tasks, preds, args.predictions)
        return select_by_flags(tasks, args)

    return select


async def _eval(cfg, args, tasks: list[Task], layout: _Layout, run_id: str) -> None:
    from swefleet.envs.backends import make_grader

    episodes = layout.out / "episodes.jsonl"
    done = {(r["task_id"], r["attempt"]) for r in read_jsonl(episodes)}
    todo = [(t, a) for t in tasks for a in range(args.k) if (t.instance_id, a) not in done]
    log.info("%d episodes to run (%d already done)", len(todo), len(done))
    if not todo:  # every episode is recorded: no server, no sandbox, no empty progress bar
        return
    grader = make_grader(run_id, cfg.envs)
    policy = await _policy(cfg, args, run_id)
    limit = asyncio.Semaphore(cfg.orchestrator.max_concurrent_episodes)
    progress = _Progress(len(todo))

    async def one(task: Task, attempt: int) -> None:
        async with limit:
            t0 = time.monotonic()
            traj = await policy(task, grader)
            wall_s = time.monotonic() - t0
            await asyncio.to_thread(_keep_episode, layout, traj, attempt, wall_s)
            record = _record(task, attempt, traj, wall_s)
            append_jsonl(episodes, record)  # last: a recorded episode has its files
            progress.update(record)

    try:
        await policy.guard(asyncio.gather(*(one(t, a) for t, a in todo)))
    finally:
        grader.close(abandon=True)  # (interrupted: no grade starts after this)
        progress.close()
        await policy.aclose()


def _keep_episode(layout: _Layout, traj: Trajectory, attempt: int, wall_s: float) -> None:
    """The full trajectory (`trajectories/<instance_id>/<attempt>.json`) and SWE-bench's
    per-instance logs of one finished episode."""
    from swefleet.agents.export import write_trajectory

    write_trajectory(traj, trajectory_path(layout.out, traj.task_id, attempt))
    log_dir = instance_log_dir(layout.out, layout.run_id, layout.model_name, traj.task_id, attempt)
    write_instance_logs(log_dir, traj, attempt, wall_s)


def _record(task: Task, attempt: int, traj: Trajectory, wall_s: float) -> dict:
    scorable = traj.status not in (EpisodeStatus.infra_error, EpisodeStatus.cancelled)
    return {
        "task_id": task.instance_id, "attempt": attempt, "episode_id": traj.episode_id,
        "status": traj.status.value, "reason": traj.reason,
        "resolved": (traj.status == EpisodeStatus.resolved) if scorable else None,
        "tokens": traj.n_tokens, "turns": len(traj.turns), "wall_s": wall_s,
        "refused_submits": traj.refused_submits, "model_patch": traj.model_patch, "image_user": traj.image_user,
        "grade": traj.grade.model_dump(exclude={"log"}) if traj.grade else None,
    }


def cost_fields(report: dict, orch) -> dict:
    """Cost per rollout from the mean wall time per episode and the configured hourly price."""
    minutes = report["wall_s_mean"] / 60.0 * max(orch.n_gpus, 1)
    return {"cost_minutes_per_rollout": minutes,
            "cost_per_rollout": minutes / 60.0 * orch.gpu_hour_price, "currency": orch.currency}


class _PatchPolicy:
    """oracle / empty / predictions: a fixed patch per task, graded like any agent's."""

    def __init__(self, kind: str, predictions: dict | None = None) -> None:
        self.kind, self.predictions = kind, predictions or {}

    def patch_for(self, task: Task) -> str:
        if self.kind == "oracle":
            return task.patch
        if self.kind == "predictions":  # SWE-bench: model_patch None is graded as empty
            return self.predictions[task.instance_id].model_patch or ""
        return ""

    async def __call__(self, task: Task, grader) -> Trajectory:
        patch = self.patch_for(task)
        traj = Trajectory(episode_id=uuid.uuid4().hex[:12], task_id=task.instance_id,
                          model_patch=patch, status=EpisodeStatus.unresolved)
        try:
            result = await grader.grade(task, patch)
        except Exception as e:  # noqa: BLE001 - one episode's fault boundary: recorded, eval goes on
            traj.status, traj.reason = EpisodeStatus.infra_error, f"{type(e).__name__}: {e}"
            return traj
        traj.grade = result
        traj.image_user = getattr(grader, "image_user_of", lambda image: "")(task.image)
        if result.status == GradeStatus.resolved:
            traj.status, traj.reward = EpisodeStatus.resolved, 1.0
        elif result.status == GradeStatus.error and result.cause == GradeCause.infra:
            traj.status, traj.reason = EpisodeStatus.infra_error, result.reason
        else:
            traj.reward, traj.reason = 0.0, result.reason
        return traj

    async def guard(self, work):
        return await work

    async def aclose(self) -> None:
        pass


class _AgentPolicy:
    """The agent against a served checkpoint (the config's fleet: servers started here and
    supervised, or running ones); `stack` stops them."""

    def __init__(self, cfg, fleet, supervisor, farm, tokenizer, stack) -> None:
        self.cfg, self.fleet, self.supervisor = cfg, fleet, supervisor
        self.farm, self.tokenizer, self.stack = farm, tokenizer, stack
        self.agent = None  # cfg.agent fitted to the servers' window at the first episode

    async def __call__(self, task: Task, grader) -> Trajectory:
        from swefleet.agents.config import fit_context_budget
        from swefleet.orchestrator.rollout import RolloutContext, RolloutHandle, run_rollout

        if self.agent is None:
            self.agent = fit_context_budget(self.cfg.agent, await self.fleet.max_model_len())
        ctx = RolloutContext(self.farm, grader, self.fleet, self.tokenizer, self.agent)
        handle = RolloutHandle(uuid.uuid4().hex[:12], 0)
        return await run_rollout(ctx, task, handle, group_id="", sink=lambda t: None)

    async def guard(self, work):
        """`work`, cancelled with `NoServersLeft` when every server is lost."""
        return await self.supervisor.guard(work)

    async def aclose(self) -> None:
        for url, snap in self.fleet.server_metrics().items():
            log.info("server %s: %d completions, %d tokens", url, snap["completed"],
                     snap["tokens"])
        await self.farm.close()
        await self.stack.aclose()


def load_predictions_for(args: argparse.Namespace) -> dict:
    """The predictions file of `--agent predictions`, keyed by instance id."""
    from swefleet.envs.swebench_io import read_predictions

    if not args.predictions:
        raise SystemExit("--agent predictions needs --predictions FILE (SWE-bench JSONL/JSON)")
    return read_predictions(args.predictions)


def only_predicted(tasks: list[Task], predictions: dict, source: str) -> list[Task]:
    """The tasks a predictions file answers (SWE-bench grades submitted instances only); ids the
    task set does not have are an error naming them."""
    known = {t.instance_id for t in tasks}
    unknown = sorted(set(predictions) - known)
    if unknown:
        raise ValueError(f"{source}: {len(unknown)} prediction(s) for instances not in the task "
                         f"set: {', '.join(unknown[:10])}")
    return [t for t in tasks if t.instance_id in predictions]


async def _policy(cfg, args, run_id: str):
    if args.agent in ("oracle", "empty"):
        return _PatchPolicy(args.agent)
    if args.agent == "predictions":
        return _PatchPolicy("predictions", load_predictions_for(args))
    if args.api == "chat":
        return _chat_policy(cfg, args, run_id)
    from contextlib import AsyncExitStack

    from swefleet.agents.tokenizer import Tokenizer
    from swefleet.app.servers import open_fleet
    from swefleet.envs.backends import make_farm

    if not args.model:
        raise SystemExit("--agent model needs --model DIR (tokenizer, and served unless --server)")
    stack = AsyncExitStack()
    try:
        fleet, supervisor = await open_fleet(cfg, Path(args.model),
                                             Path(args.output_dir) / "logs", stack)
    except BaseException:
        await stack.aclose()
        raise
    return _AgentPolicy(cfg, fleet, supervisor, make_farm(run_id, cfg.envs),
                        Tokenizer.from_dir(args.model), stack)


class _ChatPolicy:
    """The agent against a chat endpoint (`--api chat`): messages, no local tokenizer."""

    def __init__(self, cfg, client, farm) -> None:
        self.cfg, self.client, self.farm = cfg, client, farm

    async def __call__(self, task: Task, grader) -> Trajectory:
        from swefleet.agents.chat_loop import run_chat_episode
        from swefleet.orchestrator.rollout import RolloutContext, RolloutHandle, run_rollout

        ctx = RolloutContext(self.farm, grader, self.client, None, self.cfg.agent,
                             episode=run_chat_episode)
        handle = RolloutHandle(uuid.uuid4().hex[:12], 0)
        return await run_rollout(ctx, task, handle, group_id="", sink=lambda t: None)

    async def guard(self, work):
        return await work

    async def aclose(self) -> None:
        log.info("chat endpoint %s: %s", self.client.url, self.client.totals)
        await self.farm.close()
        await self.client.aclose()


def _chat_policy(cfg, args, run_id: str) -> _ChatPolicy:
    from swefleet.envs.backends import make_farm
    from swefleet.inference.chat_client import ChatClient

    key = api_key_from_env(cfg.inference.api_key_env)
    client = ChatClient(args.server[0], args.model, cfg.inference, api_key=key)
    return _ChatPolicy(cfg, client, make_farm(run_id, cfg.envs))


class _Progress:
    def __init__(self, total: int) -> None:
        from swefleet.console import make_progress

        self.counts = {"resolved": 0, "unresolved": 0, "errors": 0}
        self.bar = make_progress(stderr=False)
        self.task = self.bar.add_task(self._label(), total=total)
        self.bar.start()

    def _label(self) -> str:
        return "eval " + " ".join(f"{k}={v}" for k, v in self.counts.items())

    def update(self, record: dict) -> None:
        key = {True: "resolved", False: "unresolved", None: "errors"}[record["resolved"]]
        self.counts[key] += 1
        self.bar.update(self.task, advance=1, description=self._label())

    def close(self) -> None:
        self.bar.stop()


def load_report(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())
