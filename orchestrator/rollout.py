"""One rollout = one unit of work: sandbox -> agent episode -> grading -> scored Trajectory.

This is the fault boundary of an episode: whatever happens, a Trajectory with one typed status
comes out (and is handed to `sink`), infrastructure failures are never scored as reward 0.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from swefleet.agents.config import AgentConfig
from swefleet.agents.loop import run_episode
from swefleet.envs.protocol import Farm, Grader, InfraError
from swefleet.inference.protocol import ModelClient
from swefleet.orchestrator.branch_episode import continue_episode
from swefleet.orchestrator.gold_canary import GoldCanary

from swefleet.types import EpisodeStatus, GradeCause, GradeStatus, Task, Trajectory

if TYPE_CHECKING:
    from swefleet.orchestrator.branching import BranchPoint

#: Episode endings whose patch is graded (the policy chose to stop, or ran out of steps).
GRADED = frozenset(
    {EpisodeStatus.unresolved, EpisodeStatus.limit_steps, EpisodeStatus.format_errors}
)


@dataclass
class RolloutHandle:
    """What the scheduler knows about an episode in flight."""

    episode_id: str
    start_version: int
    drop_reason: EpisodeStatus | None = None
    """Set before cancelling the episode to say why (dropped_stale, cancelled)."""
    drop_note: str = ""
    """Detail recorded as the trajectory's reason when the scheduler drops the episode."""
    started_at: float | None = None
    """`time.monotonic()` when the episode got its slot and started."""
    grading: bool = False
    """The agent has ended and the patch is being graded (bounded by the grader's own timeout):
    no longer a straggler candidate, so the straggler cut cannot favour the episodes that end
    without grading (failures, with `agent.grade_unsubmitted = false`)."""
    branch: BranchPoint | None = None
    """Where the episode starts when its group branches from a shared prefix
    (`orchestrator/branching.py`); None: from the first turn."""


Sink = Callable[[Trajectory], None]
#: The environment seam of the RL loop: run one episode of a task, hand the trajectory to the
#: sink (always), return it. `swe_rollout(ctx)` is the SWE environment; `orchestrator.toy` has a
#: verifiable one for learning-sanity checks.
RolloutFn = Callable[[Task, RolloutHandle, str, Sink], Awaitable[Trajectory]]


@dataclass
class RolloutContext:
    farm: Farm
    grader: Grader
    model: ModelClient
    tokenizer: object
    agent: AgentConfig
    on_start: Sink | None = None
    """Called with the empty trajectory when an episode starts (the run's started journal:
    `orchestrator/resume.py`, so a killed run can settle the episodes it never finished)."""
    episode: Callable[..., Awaitable[Trajectory]] = run_episode
    """Runs the agent's episode in the sandbox: `agents.loop.run_episode` (token-exact), or
    `agents.chat_loop.run_chat_episode` (messages to a chat endpoint, `swefleet eval --api
    chat`)."""
    gold_canary: GoldCanary | None = None
    """Grades a share of the tasks' gold patches beside the episodes' grades (never their
    reward): `orchestrator/gold_canary.py`."""


async def run_rollout(
    ctx: RolloutContext,
    task: Task,
    handle: RolloutHandle,
    group_id: str,
    sink: Sink,
) -> Trajectory:
    t0 = time.monotonic()
    traj = Trajectory(episode_id=handle.episode_id, task_id=task.instance_id, group_id=group_id)
    if handle.branch is not None:  # linked even when no episode runs (infra errors)
        traj.branch_of, traj.branch_turn = handle.branch.parent.episode_id, handle.branch.turn
    if ctx.on_start is not None:
        ctx.on_start(traj)
    ended: list[Trajectory] = []  # the agent hands over its trajectory even when cancelled
    try:
        async with ctx.farm.acquire(task) as sandbox:
            t_sandbox = time.monotonic() - t0
            episode = ctx.episode if handle.branch is None else functools.partial(
                continue_episode, handle.branch)
            traj = await episode(
                task, sandbox, ctx.model, ctx.tokenizer, ctx.agent,
                episode_id=handle.episode_id, group_id=group_id, on_end=ended.append,
            )
            traj.timings["sandbox"] = t_sandbox
            traj.image_user = getattr(sandbox, "image_user", "")
        handle.grading = True
        await _score(ctx, task, traj)
    except asyncio.CancelledError:
        traj = ended[-1] if ended else traj
        traj.status, traj.reward = EpisodeStatus.cancelled, None
        traj.reason = traj.reason or "cancelled"
        raise
    except InfraError as e:
        traj.status, traj.reason, traj.reward = EpisodeStatus.infra_error, f"InfraError: {e}", None
    except Exception as e:  # noqa: BLE001 - the episode's fault boundary: record, never crash the run
        traj.status = EpisodeStatus.infra_error
        traj.reason = f"{type(e).__name__}: {e}"
        traj.reward = None
    finally:
        traj.timings["total"] = time.monotonic() - t0
        sink(traj)
    return traj


async def _score(ctx: RolloutContext, task: Task, traj: Trajectory) -> None:
    """The reward of an ended episode: graded, 0 without grading, or none (masked)."""
    submitted = traj.status == EpisodeStatus.unresolved
    if traj.status in GRADED and (submitted or ctx.agent.grade_unsubmitted):
        await _grade(ctx, task, traj)
    elif traj.status in GRADED:
        traj.reward = 0.0  # ended without submitting, and only submitted fixes are paid
    elif traj.status == EpisodeStatus.limit_disk:
        traj.reward = 0.0  # the agent broke its sandbox: scored, nothing left to grade


async def _grade(ctx: RolloutContext, task: Task, traj: Trajectory) -> None:
    t0 = time.monotonic()
    result = await ctx.grader.grade(task, traj.model_patch)
    traj.timings["grading"] = time.monotonic() - t0
    if ctx.gold_canary is not None:
        ctx.gold_canary.after_grade(task)  # its own task: this episode does not wait for it
    traj.grade = result
    if result.status == GradeStatus.error and result.cause == GradeCause.infra:
        traj.status, traj.reason, traj.reward = EpisodeStatus.infra_error, result.reason, None
        return
    resolved = result.status == GradeStatus.resolved
    traj.reward = 1.0 if resolved else 0.0
    if result.status == GradeStatus.tampered:
        traj.reward = ctx.agent.tampered_reward
    if resolved:
        traj.status = EpisodeStatus.resolved
    elif traj.status == EpisodeStatus.unresolved and result.reason:
        traj.reason = result.reason


def swe_rollout(ctx: RolloutContext) -> RolloutFn:
    """The SWE environment: sandbox from the farm, agent episode, independent grading."""

    async def rollout(task: Task, handle: RolloutHandle, group_id: str, sink: Sink) -> Trajectory:
        return await run_rollout(ctx, task, handle, group_id, sink)

    return rollout
