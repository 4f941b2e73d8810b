"""A run folder of long scripted episodes, made in seconds, for `swefleet replay` tests and
`benchmarks/replay.py`: `config.json`, `episodes.jsonl` and the policy `weights/v000000/` (the
project's tiny random model, whose tokenizer recorded the episodes), as an RL run writes them.

    record_scripted_run(Path("out/long"), "envs/data/quickstart/tasks.jsonl", n=1, turns=12)

Each episode is played by the real agent loop (bash scaffold) in a real sandbox with a
`ScriptedModel`: reading commands, the task's gold patch applied at turn `apply_at`, more reading
commands, then the submission (turn `turns - 1`). Its replies are token-exact records like any
model's, so a replay restores them and `swefleet replay --continue` resumes them.
"""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

from swefleet.app.config import RunConfig

READING = ("ls", "git status --short", "git log --oneline | head -3", "ls -a | wc -l",
           "find . -name '*.py' | sort | head -5", "git diff --stat", "pwd", "echo $HOME",
           "head -3 README* 2>/dev/null || true", "git rev-parse --short HEAD")
"""Commands of the reading turns, in a cycle (short, deterministic outputs)."""

MAX_TOKENS_PER_TURN = 32
"""`agent.max_tokens_per_turn` recorded in the run's config: what a continuation asks for."""


THOUGHT = ["the", "failing", "behaviour", "points", "at", "this", "module", "so", "I", "read",
           "it", "and", "its", "tests", "first", "and", "then", "check", "what", "the", "last",
           "command", "showed", "before", "I", "change", "anything"]
"""Words of the reasoning that precedes each command with `thought_words` (in a cycle)."""


def scripted_replies(patch: str, turns: int, apply_at: int, test_command: str = "",
                     test_every: int = 0, thought_words: int = 0) -> list[str]:
    """The `turns` replies of one episode: reading commands (every `test_every`-th turn runs
    `test_command` instead, as agents run the tests), the gold patch at `apply_at`, the
    submission last; each after `thought_words` words of reasoning, as agents write."""
    from swefleet.agents.scaffolds import SUBMIT_SENTINEL
    from swefleet.trainer.sft_oracle import apply_command

    if not 0 <= apply_at < turns - 1:
        raise ValueError(f"apply_at={apply_at} must be a turn before the last of {turns}")
    commands = [READING[i % len(READING)] for i in range(turns - 1)]
    if test_every:
        for i in range(test_every - 1, turns - 1, test_every):
            commands[i] = test_command
    commands[apply_at] = apply_command(patch)
    thought = " ".join(THOUGHT[i % len(THOUGHT)] for i in range(thought_words))
    head = f"THOUGHT: {thought}\n\n" if thought else ""
    return [f"{head}```bash\n{c}\n```" for c in [*commands, f"echo {SUBMIT_SENTINEL}"]]


def record_scripted_run(out_dir: Path, tasks_file: str | Path, n: int = 1, turns: int = 12,
                        apply_at: int = 1, backend: str = "docker",
                        test_every: int = 0, thought_words: int = 0) -> RunConfig:
    """Record one scripted episode for each of the first `n` tasks of `tasks_file` in
    `out_dir` (created), with the tiny model as the run's policy; returns the run's config.
    `test_every`: every that many turns the episode runs the task's tests (0: never);
    `thought_words`: the reasoning before each command (`scripted_replies`)."""
    from swefleet.agents.export import append_trajectories
    from swefleet.agents.tokenizer import Tokenizer
    from swefleet.tinymodel import create_tiny_model

    cfg = RunConfig(name=out_dir.name)
    cfg.tasks.path = str(Path(tasks_file).resolve())
    cfg.tasks.limit = n
    cfg.envs.backend = backend  # type: ignore[assignment]
    cfg.inference.device = "cpu"
    cfg.agent.max_tokens_per_turn = MAX_TOKENS_PER_TURN
    cfg.agent.context_budget_tokens = 16384
    out_dir.mkdir(parents=True, exist_ok=True)
    weights = create_tiny_model(out_dir / "weights" / "v000000")
    shape = (turns, apply_at, test_every, thought_words)
    trajs = asyncio.run(_episodes(cfg, Tokenizer.from_dir(weights), shape))
    (out_dir / "config.json").write_text(cfg.model_dump_json(indent=2))
    append_trajectories(trajs, out_dir / "episodes.jsonl")
    return cfg


async def _episodes(cfg: RunConfig, tokenizer, shape: tuple) -> list:
    from swefleet.app.rl import prepare_tasks
    from swefleet.envs.backends import make_farm

    tasks = await asyncio.to_thread(prepare_tasks, cfg)
    async with make_farm(f"{cfg.name}-scripted-{uuid.uuid4().hex[:8]}", cfg.envs) as farm:
        return list(await asyncio.gather(*(_episode(t, farm, tokenizer, cfg, shape)
                                           for t in tasks)))


async def _episode(task, farm, tokenizer, cfg: RunConfig, shape: tuple):
    from swefleet.agents.loop import run_episode
    from swefleet.agents.scripted import ScriptedModel
    from swefleet.types import EpisodeStatus

    turns, apply_at, test_every, thought_words = shape
    tests = f"{task.test_cmd} {' '.join(task.test_files)} 2>&1 | tail -3"
    replies = scripted_replies(task.patch, turns, apply_at, tests, test_every, thought_words)
    longest = max(len(tokenizer.encode(r)) + 1 for r in replies)
    agent = cfg.agent.model_copy(update={"max_tokens_per_turn": longest})
    model = ScriptedModel(tokenizer, replies, logprob=-0.1)
    async with farm.acquire(task) as sandbox:
        traj = await run_episode(task, sandbox, model, tokenizer, agent,
                                 episode_id=f"scripted-{uuid.uuid4().hex[:8]}")
    if traj.status != EpisodeStatus.unresolved or len(traj.turns) != turns:
        raise RuntimeError(f"{task.instance_id}: the scripted episode ended {traj.status.value} "
                           f"after {len(traj.turns)} turns ({traj.reason})")
    return traj
