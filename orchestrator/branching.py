"""RL groups branched from a shared prefix (`[orchestrator.branching]`, docs/replay.md).

Before a group starts, `Brancher.point` picks its parent episode and the prefix's last turn k:
a `live` parent is one episode of the task run now to turn k (its own sandbox, then removed;
recorded in `prefixes.jsonl`), a `recorded` parent a finished episode of the task from an
earlier run or from this one. Each of the group's episodes then starts from turns 0..k of the
parent (their tokens, copied) in a fresh sandbox restored by replaying the parent's actions
(`orchestrator/branch_episode.py`), and continues with the policy from turn k+1; it is graded
as any episode. Its trajectory records `branch_of` and `branch_turn`; the batch masks the
prefix out of the loss (`orchestrator/advantages.py`). A group whose parent offers no branch
point runs from the start, counted under `branch/groups_fresh`.

    brancher = Brancher(ctx, cfg.branching, run_dir, seed=cfg.seed)
    loop = RLLoop(cfg, brancher.recording(swe_rollout(ctx)), tasks, run_dir, update,
                  branch_points=brancher.point)
"""

from __future__ import annotations

import asyncio
import logging
import random
import uuid
from collections import defaultdict, deque
from dataclasses import dataclass, field
from pathlib import Path

from swefleet.agents.chat import ChatML
from swefleet.agents.loop import run_episode
from swefleet.agents.scaffolds import make_scaffold
from swefleet.envs.protocol import InfraError
from swefleet.orchestrator.config import BranchingConfig
from swefleet.orchestrator.rollout import RolloutContext, RolloutFn, RolloutHandle, Sink

from swefleet.rundir import RunDir, append_jsonl, read_jsonl
from swefleet.types import NON_SCORABLE, EpisodeStatus, Task, Trajectory, Turn

log = logging.getLogger(__name__)

PREFIXES = "prefixes.jsonl"
"""The live parents of a run (run directory): never graded nor trained on."""
KEEP_PER_TASK = 64
"""Recorded parents kept per task (the newest)."""


@dataclass
class BranchStats:
    """Counters of a run's branching, reported with every step (cumulative)."""

    branched: int = 0
    fresh: int = 0
    restored: int = 0
    replay_mismatches: int = 0

    def step_metrics(self) -> dict[str, float]:
        return {"branch/groups_branched": float(self.branched),
                "branch/groups_fresh": float(self.fresh),
                "branch/restores": float(self.restored),
                "branch/replay_mismatches": float(self.replay_mismatches)}


@dataclass(frozen=True)
class BranchPoint:
    """Where a group's episodes start: after turn `turn` of `parent`."""

    parent: Trajectory
    turn: int
    stats: BranchStats = field(default_factory=BranchStats, compare=False)
    """Where the branches count their restores (the brancher's)."""

    @property
    def prefix(self) -> list[Turn]:
        return self.parent.turns[: self.turn + 1]


def branchable_turns(traj: Trajectory) -> int:
    """How many of `traj`'s turns a branch can start after (turns 0..n-1): a turn another
    followed, and the last one when the step limit ended the episode after its action."""
    n = len(traj.turns) - 1
    if traj.turns and traj.status == EpisodeStatus.limit_steps:
        n += 1
    return max(n, 0)


def choose_turn(turn: float | str, n_points: int, rng: random.Random) -> int | None:
    """The prefix's last turn among `n_points` branch points (None when there is none)."""
    if n_points < 1:
        return None
    if turn == "random":
        return rng.randrange(n_points)
    if isinstance(turn, float):
        return min(int(turn * n_points), n_points - 1)
    return min(int(turn), n_points - 1)


class Brancher:
    """Picks each group's branch point (`point`) and remembers this run's finished episodes
    as recorded parents (`recording`)."""

    def __init__(self, ctx: RolloutContext, cfg: BranchingConfig, run_dir: RunDir,
                 seed: int = 0) -> None:
        if ctx.agent.max_steps < 2:
            raise ValueError("orchestrator.branching needs agent.max_steps >= 2 (a branch "
                             "continues after the prefix's last turn)")
        self.ctx, self.cfg, self.run_dir = ctx, cfg, run_dir
        self.rng = random.Random(seed)
        self.stats = BranchStats()
        self.chat = ChatML(ctx.tokenizer)
        self.scaffold = make_scaffold(ctx.agent)
        self.recorded: dict[str, deque[Trajectory]] = defaultdict(
            lambda: deque(maxlen=KEEP_PER_TASK))
        if cfg.source == "recorded":
            source = Path(cfg.recorded_run) if cfg.recorded_run else run_dir.root
            if cfg.recorded_run and not (source / "episodes.jsonl").is_file():
                raise ValueError(f"branching.recorded_run {cfg.recorded_run}: no episodes.jsonl")
            for record in read_jsonl(source / "episodes.jsonl"):
                self.remember(Trajectory.model_validate(record))

    async def point(self, task: Task, group_id: str) -> BranchPoint | None:
        """The group's branch point; None runs the group from the start."""
        if self.cfg.source == "live":
            found = await self._live(task, group_id)
        else:
            found = self._recorded(task)
        if found is None:
            self.stats.fresh += 1
            return None
        self.stats.branched += 1
        return BranchPoint(parent=found[0], turn=found[1], stats=self.stats)

    def remember(self, traj: Trajectory) -> None:
        """Keep `traj` as a recorded parent of its task when it has a branch point."""
        if traj.status not in NON_SCORABLE and branchable_turns(traj) > 0:
            self.recorded[traj.task_id].append(traj)

    def recording(self, rollout: RolloutFn) -> RolloutFn:
        """`rollout`, its finished episodes remembered as parents (`source = "recorded"` of
        this run); `rollout` itself with any other source."""
        if self.cfg.source != "recorded" or self.cfg.recorded_run:
            return rollout

        async def run(task: Task, handle: RolloutHandle, group_id: str, sink: Sink) -> Trajectory:
            def both(traj: Trajectory) -> None:
                sink(traj)
                self.remember(traj)

            return await rollout(task, handle, group_id, both)

        return run

    def _max_turn(self) -> int:
        """Turns a branch can start after within `agent.max_steps` (one turn left for it)."""
        return self.ctx.agent.max_steps - 1

    def _recorded(self, task: Task) -> tuple[Trajectory, int] | None:
        first = self.chat.initial_prompt(self.scaffold.system_prompt(task),
                                         self.scaffold.instance_prompt(task))
        parents = [t for t in self.recorded.get(task.instance_id, ())
                   if t.turns[0].prompt_ids == first]
        if not parents:
            return None
        parent = self.rng.choice(parents)
        n_points = min(branchable_turns(parent), self._max_turn())
        return parent, choose_turn(self.cfg.turn, n_points, self.rng)

    async def _live(self, task: Task, group_id: str) -> tuple[Trajectory, int] | None:
        planned = choose_turn(self.cfg.turn, self._max_turn(), self.rng)
        parent = await self._run_parent(task, group_id, planned)
        if parent is None or parent.status in NON_SCORABLE:
            return None
        n_points = branchable_turns(parent)
        return None if n_points < 1 else (parent, min(planned, n_points - 1))

    async def _run_parent(self, task: Task, group_id: str, turn: int) -> Trajectory | None:
        """One episode of `task` to turn `turn` (then the step limit ends it), recorded in
        `prefixes.jsonl`; None when no sandbox could be made."""
        ctx = self.ctx
        agent = ctx.agent.model_copy(update={"max_steps": turn + 1})
        episode_id = f"prefix-{uuid.uuid4().hex[:12]}"
        try:
            async with ctx.farm.acquire(task) as sandbox:
                parent = await run_episode(task, sandbox, ctx.model, ctx.tokenizer, agent,
                                           episode_id=episode_id, group_id=group_id)
        except InfraError as e:
            log.warning("branching: no parent for %s (%s); the group starts fresh",
                        task.instance_id, e)
            return None
        parent.reward = None  # never graded
        await asyncio.to_thread(append_jsonl, self.run_dir.root / PREFIXES, parent)
        return parent
