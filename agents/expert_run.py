"""Expert demonstrations: the scripted expert played through the real agent loop in a real
sandbox, graded by the real grader, kept only when resolved.

One `expert_demonstration` per task: a fresh sandbox from the farm; the buggy files the gold
patch changes are read from it (and the tracked files listed when the task names no test
files) to plan (`agents.expert.plan_demonstration`); the expert's replies are played by
`agents.loop.run_episode` with an `ExpertModel` (a share of the plans with a first guess:
`agents.expert_guess`) (token-exact, observations included); the
submitted patch is graded in a fresh container exactly as RL and eval grade. Every task ends
with one `Demonstration` whose `reason` says why it was kept (`resolved`) or dropped: a plan
skip (`agents.expert.SKIP_REASONS`), an abort mid-episode (`expert_dialogue.ABORT_REASONS`),
`episode_<status>` (the loop ended otherwise), `grade_<status>` (graded, not resolved) or
`grading_infra_error`.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from swefleet.agents.config import AgentConfig
from swefleet.agents.expert import ExpertSkip, parse_hunks, plan_demonstration
from swefleet.agents.expert_dialogue import ExpertModel, expert_steps
from swefleet.agents.expert_guess import takes_first_guess, with_first_guess
from swefleet.agents.loop import attached_task, run_episode
from swefleet.envs.protocol import Farm, Grader, Sandbox

from swefleet.types import EpisodeStatus, GradeCause, GradeStatus, Task, Trajectory

RECORDING_MAX_STEPS = 24
"""Turns an expert episode may take while it is recorded (it needs 6-10)."""
RECORDING_MAX_TOKENS_PER_TURN = 4096
"""Tokens one expert reply may have while it is recorded (a long `str_replace` is < 1000)."""


@dataclass
class Demonstration:
    """How one task's expert demonstration ended."""

    task_id: str
    reason: str
    """`resolved` (kept), else why it was dropped (see the module docstring)."""
    detail: str = ""
    trajectory: Trajectory | None = None
    seconds: float = 0.0

    @property
    def kept(self) -> bool:
        return self.reason == "resolved" and self.trajectory is not None


def recording_config(agent: AgentConfig) -> AgentConfig:
    """`agent` with room for a whole expert episode: at least `RECORDING_MAX_STEPS` turns and
    replies of `RECORDING_MAX_TOKENS_PER_TURN` tokens (within the context budget, which is
    kept: a demonstration must fit the model's window)."""
    per_turn = max(agent.max_tokens_per_turn, RECORDING_MAX_TOKENS_PER_TURN)
    return agent.model_copy(update={
        "max_steps": max(agent.max_steps, RECORDING_MAX_STEPS),
        "max_tokens_per_turn": min(per_turn, agent.context_budget_tokens - 1),
        "max_format_errors": 1,
    })


async def read_plan_inputs(task: Task, sandbox: Sandbox, timeout_s: float
                           ) -> tuple[dict[str, bytes], list[str]]:
    """The files the gold patch changes (bytes; absent ones left out) and, when the task names
    no test files, the repository's tracked files: read-only, before the episode starts."""
    files: dict[str, bytes] = {}
    for path in dict.fromkeys(h.path for h in parse_hunks(task.patch)):
        try:
            async with asyncio.timeout(timeout_s):
                files[path] = await sandbox.read_file(path)
        except (FileNotFoundError, IsADirectoryError):
            continue
    tracked: list[str] = []
    if not task.test_files:
        result = await sandbox.run("git ls-files", timeout_s=timeout_s)
        tracked = result.output.splitlines() if result.exit_code == 0 else []
    return files, tracked


async def expert_demonstration(task: Task, farm: Farm, grader: Grader, tokenizer,
                               agent: AgentConfig, first_guess_fraction: float = 0.0
                               ) -> Demonstration:
    """One expert episode of `task` in a fresh sandbox of `farm`, graded by `grader`; when the
    task's stable draw falls within `first_guess_fraction`, the expert tries a wrong edit of the
    buggy line first (`agents.expert_guess`)."""
    start = time.monotonic()
    agent = recording_config(agent)
    async with farm.acquire(task) as sandbox:
        files, tracked = await read_plan_inputs(task, sandbox, agent.command_timeout_s)
        try:
            plan = plan_demonstration(attached_task(task, agent)[0], files, tracked)  # as shown
            if takes_first_guess(task.instance_id, first_guess_fraction):
                plan = with_first_guess(plan, files, _bug_kind(task), task.instance_id)
        except ExpertSkip as skip:
            return Demonstration(task.instance_id, skip.reason, str(skip),
                                 seconds=time.monotonic() - start)
        model = ExpertModel(tokenizer, expert_steps(plan, task, trace=agent.scaffold == "tools"),
                             agent.scaffold)
        traj = await run_episode(task, sandbox, model, tokenizer, agent,
                                 episode_id=f"expert-{uuid.uuid4().hex[:8]}")
        traj.image_user = getattr(sandbox, "image_user", "")
    if model.abort is not None:
        return _dropped(task, model.abort.reason, str(model.abort), traj, start)
    if traj.status != EpisodeStatus.unresolved or not traj.model_patch.strip():
        return _dropped(task, f"episode_{traj.status.value}", traj.reason or "no patch", traj,
                        start)
    t0 = time.monotonic()
    result = await grader.grade(task, traj.model_patch)
    traj.timings["grading"] = time.monotonic() - t0
    traj.grade = result
    if result.status == GradeStatus.error and result.cause == GradeCause.infra:
        return _dropped(task, "grading_infra_error", result.reason, traj, start)
    if result.status != GradeStatus.resolved:
        traj.reward = 0.0
        return _dropped(task, f"grade_{result.status.value}", result.reason, traj, start)
    traj.status, traj.reward = EpisodeStatus.resolved, 1.0
    return Demonstration(task.instance_id, "resolved", "", traj, time.monotonic() - start)


def _bug_kind(task: Task) -> str:
    return str((task.model_extra or {}).get("bug_kind", ""))


def _dropped(task: Task, reason: str, detail: str, traj: Trajectory, start: float
             ) -> Demonstration:
    return Demonstration(task.instance_id, reason, detail, traj, time.monotonic() - start)


async def expert_demonstrations(
    tasks: list[Task], farm: Farm, grader: Grader, tokenizer, agent: AgentConfig,
    concurrency: int = 2, on_done: Callable[[Demonstration], None] | None = None,
    first_guess_fraction: float = 0.0,
) -> list[Demonstration]:
    """Expert demonstrations of every task, `concurrency` at a time, in task order (a share of
    them with a first guess: `expert_demonstration`). An
    exception in one task (a sandbox that could not start) ends only that task, recorded as
    `infra_error` with its type and message."""
    limit = asyncio.Semaphore(concurrency)

    async def one(task: Task) -> Demonstration:
        async with limit:
            t0 = time.monotonic()
            try:
                demo = await expert_demonstration(task, farm, grader, tokenizer, agent,
                                                  first_guess_fraction)
            except Exception as exc:  # noqa: BLE001 - one task's fault boundary, recorded
                demo = Demonstration(task.instance_id, "infra_error",
                                     f"{type(exc).__name__}: {exc}",
                                     seconds=time.monotonic() - t0)
        if on_done is not None:
            on_done(demo)
        return demo

    return list(await asyncio.gather(*(one(t) for t in tasks)))


def summary(demos: list[Demonstration], wall_s: float | None = None) -> dict:
    """Kept / dropped counts (by reason), and the kept demonstrations' mean turns and tokens
    (prompt + completions of the whole episode, the training sample)."""
    kept = [d.trajectory for d in demos if d.kept]
    turns = [len(t.turns) for t in kept]
    tokens = [t.n_tokens for t in kept]
    generated = [sum(len(turn.completion_ids) for turn in t.turns) for t in kept]
    out = {
        "tasks": len(demos), "kept": len(kept), "dropped": len(demos) - len(kept),
        "reasons": dict(Counter(d.reason for d in demos if not d.kept)),
        "mean_turns": _mean(turns), "mean_tokens": _mean(tokens),
        "mean_generated_tokens": _mean(generated),
        "max_tokens": max(tokens, default=0),
        "per_task": [{"task_id": d.task_id, "reason": d.reason, "detail": d.detail[:300],
                      "turns": len(d.trajectory.turns) if d.trajectory else 0,
                      "seconds": round(d.seconds, 1)} for d in demos],
    }
    if wall_s is not None:
        out["wall_s"] = round(wall_s, 1)
    return out


def _mean(values: list[int]) -> float:
    return round(sum(values) / len(values), 1) if values else 0.0
