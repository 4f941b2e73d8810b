"""`swefleet replay RUN --episode ID --turn K --continue`: a model runs the episode on from turn
K in its restored sandbox, the result is graded like the run's episodes, and the new trajectory
is saved as `RUN/replays/<episode_id>.json`, linked to its parent (docs/replay.md).

The model: by default the run's policy (its newest `weights/vNNNNNN/`) served the way `swefleet
eval --agent model` serves a checkpoint (`swefleet.app.servers.open_fleet`: the run's inference
config, e.g. the embedded engine); `--server URL` a running token server (swefleet or vLLM;
the tokenizer from `--model DIR`, else the run's weights); `--api chat --server URL` an
OpenAI-compatible chat endpoint, for episodes recorded through one.
"""

from __future__ import annotations

import argparse
import json
import uuid
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from swefleet.app.replay_restore import Restorer
from swefleet.app.replay_run import ReplayRun
from swefleet.types import Task, Trajectory


@dataclass
class ModelSource:
    """Who continues the episode."""

    api: str
    """`tokens` or `chat`."""
    servers: list[str]
    """Running servers (`--server`); empty: serve `model_dir`."""
    model: str
    """tokens: the checkpoint (or tokenizer) dir; chat: the model name to request."""
    weights_version: int | None
    """The run's policy version of `model` (its `weights/vNNNNNN/`), when it is one."""


def newest_weights(run: ReplayRun) -> tuple[Path, int] | None:
    """The run's newest published checkpoint dir and its version, if any."""
    from swefleet.rundir import version_dirs

    dirs = {v: d for v, d in version_dirs(run.root / "weights").items()
            if (d / "config.json").is_file()}
    return (dirs[max(dirs)], max(dirs)) if dirs else None


def model_source(run: ReplayRun, parent: Trajectory, args: argparse.Namespace) -> ModelSource:
    """Checked before any sandbox: ValueError (one line) when no model can continue."""
    from swefleet.agents.chat_record import ChatTrajectory

    is_chat = isinstance(parent, ChatTrajectory)
    if args.api == "chat":
        return _chat_source(run, args, is_chat)
    if is_chat:
        raise ValueError(f"episode {parent.episode_id} was recorded through a chat endpoint: "
                         "continue it with --api chat --server URL")
    weights = newest_weights(run)
    if args.model:
        if not Path(args.model).is_dir():
            raise ValueError(f"--model {args.model}: no such checkpoint or tokenizer dir")
        model, version = args.model, None
    elif weights is not None:
        model, version = str(weights[0]), weights[1]
    elif args.server:
        raise ValueError(f"{run.root}: no weights (weights/vNNNNNN/) for the tokenizer of "
                         "--server: give the model's tokenizer dir with --model DIR")
    else:
        raise ValueError(f"{run.root}: no weights (weights/vNNNNNN/) to serve and no --server "
                         "URL: nothing can continue the episode")
    if args.server:
        from swefleet.evals.served import check_served_model

        inf = run.config.inference
        for url in args.server:
            check_served_model(url, inf.model_name, inf.connect_timeout_s)
    return ModelSource("tokens", list(args.server), model, version)


def _chat_source(run: ReplayRun, args: argparse.Namespace, is_chat: bool) -> ModelSource:
    from swefleet.evals.chat_endpoint import api_key_from_env, chat_model_name

    if len(args.server) != 1:
        raise ValueError("--api chat needs exactly one --server URL (the chat endpoint)")
    if not is_chat:
        raise ValueError("--api chat continues episodes recorded through a chat endpoint; this "
                         "one is token-exact: continue it with --api tokens (the run's weights, "
                         "or --server URL of a token server)")
    inf = run.config.inference
    name = chat_model_name(args.server[0], args.model or inf.model_name,
                           api_key_from_env(inf.api_key_env), inf.connect_timeout_s)
    return ModelSource("chat", list(args.server), name, None)


async def continue_episode(run: ReplayRun, parent: Trajectory, task: Task, restorer: Restorer,
                           source: ModelSource, farm, grader) -> Trajectory:
    """Restore, continue and grade; the new trajectory (`run_rollout`'s: one typed status)."""
    from swefleet.agents.replay_continue import continuation
    from swefleet.orchestrator.rollout import RolloutContext, RolloutHandle, run_rollout

    new_id = f"{parent.episode_id}-k{restorer.turn}-{uuid.uuid4().hex[:6]}"
    async with AsyncExitStack() as stack:
        model, tokenizer, agent = await _model(run, source, new_id, stack)
        ctx = RolloutContext(_RestoringFarm(farm, restorer), grader, model, tokenizer, agent,
                             episode=continuation(parent, restorer.turn, restorer))
        return await run_rollout(ctx, task, RolloutHandle(new_id, 0), group_id="",
                                 sink=lambda t: None)


async def _model(run: ReplayRun, source: ModelSource, new_id: str, stack: AsyncExitStack):
    """The client, the tokenizer and the agent config the continuation runs with."""
    agent = run.config.agent.model_copy(update={"min_policy_version": None})
    inf = run.config.inference
    if source.api == "chat":
        from swefleet.evals.chat_endpoint import api_key_from_env
        from swefleet.inference.chat_client import ChatClient

        client = ChatClient(source.servers[0], source.model, inf,
                            api_key=api_key_from_env(inf.api_key_env))
        stack.push_async_callback(client.aclose)
        return client, None, agent
    from swefleet.agents.config import fit_context_budget
    from swefleet.agents.tokenizer import Tokenizer
    from swefleet.app.servers import check_launchable, open_fleet

    cfg = run.config
    if source.servers:
        cfg = cfg.model_copy(update={"inference": inf.model_copy(
            update={"servers": source.servers, "kind": "external"})})
    check_launchable(cfg)
    fleet, _ = await open_fleet(cfg, Path(source.model), run.root / "replays" / "logs" / new_id,
                                stack)
    agent = fit_context_budget(agent, await fleet.max_model_len())
    return fleet, Tokenizer.from_dir(source.model), agent


class _RestoringFarm:
    """The farm, acquiring the restorer's sandbox (a snapshot's image on Docker); grading
    still uses the task's own image."""

    def __init__(self, farm, restorer: Restorer) -> None:
        self.farm, self.restorer = farm, restorer

    @asynccontextmanager
    async def acquire(self, task: Task):
        async with self.farm.acquire(self.restorer.task_for(task)) as sb:
            yield sb


def continuation_record(traj: Trajectory, restorer: Restorer,
                        source: ModelSource, backend: str, wall_s: float) -> dict:
    """The saved trajectory (`branch_of`, `branch_turn`: its parent and K), then who continued
    it and how its sandbox was restored (`continuation`)."""
    steps = restorer.steps
    return {**traj.model_dump(mode="json"),
            "continuation": {
                "api": source.api, "model": source.model, "servers": source.servers,
                "weights_version": source.weights_version, "backend": backend,
                "replayed_turns": len(steps), "matched_turns": sum(s.matches for s in steps),
                "wall_s": wall_s, **restorer.record()}}


def save_continuation(run: ReplayRun, record: dict) -> Path:
    from swefleet.rundir import write_text_atomic

    path = run.root / "replays" / f"{record['episode_id']}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, json.dumps(record, indent=2) + "\n")
    return path


def summary_line(record: dict, path: Path) -> str:
    new = len(record["turns"]) - record["branch_turn"] - 1
    return (f"episode {record['episode_id']} continued episode {record['branch_of']} "
            f"after turn {record['branch_turn']}: {new} new turns, {record['status']} "
            f"(reward {record['reward']}; {record['reason'] or '-'}); wrote {path}")

