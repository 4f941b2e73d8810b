"""`swefleet replay`: restore a recorded episode's sandbox at a turn and look inside, or check
how deterministic the replays of a run's episodes are (docs/replay.md).

    swefleet replay RUN_DIR --episode ID --turn K          # a shell in the restored sandbox
    swefleet replay RUN_DIR --episode ID --turn K --no-shell
    swefleet replay RUN_DIR --check                        # writes RUN_DIR/replay_check.json
    swefleet replay RUN_DIR --episode ID --turn K --continue   # a model goes on from turn K
    swefleet replay RUN_DIR --episode ID --turn K --via snapshot

The sandbox comes from the run's own `envs` config (backend, limits) through the farm, under a
run label of its own (`replay-<hex>`): it is removed when the command ends, Ctrl-C included.
How it is restored: `swefleet.app.replay_restore`; continuing: `swefleet.app.replay_continue`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
import uuid
from pathlib import Path

from swefleet.app.replay_run import ReplayRun, check_turn, load_run, task_of
from swefleet.types import Task, Trajectory

log = logging.getLogger(__name__)


def replay_cli(args: argparse.Namespace) -> int:
    """Bad input (run folder, episode, turn, task file, model) fails before any sandbox is
    made."""
    run = load_run(args.run_dir)
    if args.drop_snapshots:
        from swefleet.app.replay_restore import drop_snapshots

        print(f"removed {drop_snapshots(run)} snapshots of {run.root}")
        return _explained(run.root, 0)
    if args.check:
        _check_args(args)
        episodes = [run.episode(args.episode)] if args.episode else run.episodes
        tasks = {}
        for traj in episodes:
            if traj.turns and traj.task_id not in tasks:
                tasks[traj.task_id] = task_of(run, traj)
        return _explained(run.root, _interruptible(_check(run, episodes, tasks, args)))
    if not args.episode:
        raise ValueError("--episode ID is needed (or --check for every episode)")
    traj = run.episode(args.episode)
    turn = check_turn(traj, args.turn)
    restorer = _restorer(run, traj, turn, args)
    if args.continue_:
        return _explained(run.root, _continue_cli(run, traj, restorer, args))
    task = task_of(run, traj)
    code = _interruptible(_restore(run, traj, task, restorer, args))
    return _explained(run.root, code) if args.via == "snapshot" else code


def _explained(root: Path, code: int) -> int:
    """`code`, once the run folder's plots and index.md are written again: they describe what
    replay added there (`replay_check.json`, `replays/`)."""
    from swefleet.evals.run_report import run_kind, write_run_report

    if code == 0 and run_kind(root) is not None:
        write_run_report(root)
    return code


def _check_args(args: argparse.Namespace) -> None:
    if args.turn is not None:
        raise ValueError("--turn restores one episode; --check replays whole episodes")
    if args.continue_ or args.via != "replay":
        raise ValueError("--check replays whole episodes: no --continue, no --via snapshot")


def _restorer(run: ReplayRun, traj: Trajectory, turn: int, args: argparse.Namespace):
    from swefleet.app.replay_restore import Restorer

    if args.no_keep and args.via != "snapshot":
        raise ValueError("--no-keep removes the snapshot of --via snapshot")
    return Restorer(run, traj, turn, args.via, keep=not args.no_keep,
                    backend=args.backend or run.config.envs.backend)


def _continue_cli(run: ReplayRun, traj: Trajectory, restorer, args: argparse.Namespace) -> int:
    from swefleet.agents.replay_continue import continuable_turn
    from swefleet.app.replay_continue import model_source

    continuable_turn(traj, restorer.turn)
    source = model_source(run, traj, args)
    task = task_of(run, traj)
    return _interruptible(_continue(run, traj, task, restorer, source, args))


def _interruptible(coro) -> int:
    """`coro`'s exit code; Ctrl-C or SIGTERM cancel it (its sandbox removed on the way), then
    the command ends with one line (`swefleet.app.interrupt`)."""
    return asyncio.run(coro)


def _farm(run: ReplayRun, backend: str):
    from swefleet.envs.backends import make_farm

    envs = run.config.envs
    if backend and backend != envs.backend:
        envs = envs.model_copy(update={"backend": backend})
    return make_farm(f"replay-{uuid.uuid4().hex[:8]}", envs)


async def _replay(sb, run: ReplayRun, traj: Trajectory, through: int) -> list:
    from swefleet.agents.replay import replay_turns
    from swefleet.agents.scaffolds import make_scaffold

    agent = run.config.agent
    return await replay_turns(sb, make_scaffold(agent), traj.turns, through, agent.scaffold,
                              agent.command_timeout_s)


async def _restore(run: ReplayRun, traj: Trajectory, task: Task, restorer,
                   args: argparse.Namespace) -> int:
    from swefleet.agents.replay import recorded_seconds
    from swefleet.agents.scaffolds import make_scaffold
    from swefleet.app.replay_shell import interactive_shell, match_table, shell_argv, state_lines

    turn = restorer.turn
    t0 = time.monotonic()
    try:
        async with _farm(run, args.backend) as farm, farm.acquire(restorer.task_for(task)) as sb:
            sandbox_s = time.monotonic() - t0
            restore_s = sandbox_s + await restorer(sb, make_scaffold(run.config.agent))
            print(f"episode {traj.episode_id} ({traj.task_id}) restored to turn {turn}: "
                  f"{restorer.how()}; restore {restore_s:.2f} s (sandbox {sandbox_s:.2f} s), "
                  f"recorded {recorded_seconds(traj.turns, turn):.2f} s")
            print("\n".join(match_table(restorer.steps)))
            if args.json:
                _write_restore_json(Path(args.json), traj, restorer, await sb.diff(),
                                    sandbox_s, restore_s, farm.config.backend)
            argv, why = ([], "") if args.no_shell else shell_argv(sb, farm.config)
            if argv:
                print(f"a shell in the sandbox at turn {turn} (workdir {sb.workdir}); exit it to "
                      "remove the sandbox", flush=True)
                await interactive_shell(argv)
                return 0
            if why:
                print(f"no interactive shell ({why}): the sandbox's state instead")
            print("\n".join(await state_lines(sb)))
    finally:
        await asyncio.to_thread(restorer.finish)
    return 0


async def _continue(run: ReplayRun, traj: Trajectory, task: Task, restorer, source,
                    args: argparse.Namespace) -> int:
    from swefleet.app.replay_continue import (
        continuation_record,
        continue_episode,
        save_continuation,
        summary_line,
    )
    from swefleet.envs.backends import make_grader

    t0 = time.monotonic()
    async with _farm(run, args.backend) as farm:
        grader = make_grader(farm.run_id, farm.config)
        try:
            new = await continue_episode(run, traj, task, restorer, source, farm, grader)
        finally:
            await asyncio.to_thread(_remove_graders, farm)
            await asyncio.to_thread(restorer.finish)
        backend = farm.config.backend
    record = continuation_record(new, restorer, source, backend, time.monotonic() - t0)
    print(summary_line(record, save_continuation(run, record)))
    return 0


def _remove_graders(farm) -> None:
    """The grading containers of this command (Docker; bwrap's die with their process)."""
    if farm.config.backend == "docker":
        from swefleet.envs.reaper import remove_run_containers

        remove_run_containers(farm.run_id)


def _write_restore_json(path: Path, traj: Trajectory, restorer, patch: str,
                        sandbox_s: float, restore_s: float, backend: str) -> None:
    from swefleet.agents.replay import recorded_seconds
    from swefleet.rundir import write_text_atomic

    steps, turn = restorer.steps, restorer.turn
    matched = sum(s.matches for s in steps)
    record = {"episode_id": traj.episode_id, "task_id": traj.task_id, "turn": turn,
              "backend": backend, "replayed_turns": len(steps), "matched_turns": matched,
              "match_share": matched / len(steps) if steps else None,
              "sandbox_s": sandbox_s, "restore_s": restore_s,
              "recorded_s": recorded_seconds(traj.turns, turn), "patch": patch,
              **restorer.record(), "turns": [s.record() for s in steps]}
    write_text_atomic(path, json.dumps(record, indent=2) + "\n")


async def _check(run: ReplayRun, episodes: list[Trajectory], tasks: dict[str, Task],
                 args: argparse.Namespace) -> int:
    from swefleet.agents.replay import replayable
    from swefleet.evals.replay_check import EpisodeCheck, check_report, summary_lines
    from swefleet.rundir import write_text_atomic

    limit = asyncio.Semaphore(args.max_workers)
    async with _farm(run, args.backend) as farm:

        async def one(traj: Trajectory) -> EpisodeCheck:
            if not replayable(traj.turns, run.config.agent.scaffold, len(traj.turns)):
                return EpisodeCheck(traj.episode_id, traj.task_id, [], skipped="no action")
            async with limit:
                return await _check_one(farm, run, traj, tasks[traj.task_id])

        checks = await asyncio.gather(*(one(t) for t in episodes))
        backend = farm.config.backend
    report = {"run": str(run.root), "backend": backend, **check_report(list(checks))}
    write_text_atomic(run.root / "replay_check.json", json.dumps(report, indent=2) + "\n")
    print("\n".join(summary_lines(report)))
    print(f"wrote {run.root / 'replay_check.json'}")
    return 0


async def _check_one(farm, run: ReplayRun, traj: Trajectory, task: Task):
    """One episode replayed whole; a sandbox failure is this episode's error, not the run's."""
    from swefleet.envs.protocol import InfraError
    from swefleet.evals.replay_check import EpisodeCheck

    try:
        async with farm.acquire(task) as sb:
            steps = await _replay(sb, run, traj, len(traj.turns) - 1)
    except InfraError as e:
        log.warning("episode %s not replayed: %s", traj.episode_id, e)
        return EpisodeCheck(traj.episode_id, traj.task_id, [], f"{type(e).__name__}: {e}")
    return EpisodeCheck(traj.episode_id, traj.task_id, [s.record() for s in steps])
