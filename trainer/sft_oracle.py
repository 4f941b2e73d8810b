"""The oracle agent: applies a task's gold patch through the agent's own scaffold, then submits.

Its replies are what a model would write in the scaffold's action format (one ```bash block, or
one Qwen3 tool call): first `git apply --unidiff-zero` of the gold patch with its context lines
dropped (`zero_context_patch`: the shortest patch git still applies exactly), then the submit
action. They are played by the real agent loop in a real sandbox (a `ScriptedModel` per task),
so an oracle trajectory is token-exact, observations included: the supervised fine-tuning data
of `swefleet sft`.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Callable

from swefleet.agents.config import AgentConfig
from swefleet.agents.scaffolds import SUBMIT_SENTINEL

from swefleet.types import EpisodeStatus, Task, Trajectory

_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
_DROPPED_HEADERS = ("diff --git ", "index ")


def _range(start: int, count: int) -> str:
    """A zero-context hunk range: an empty side names the line before it (unified format)."""
    return f"{start - 1 if count == 0 else start},{count}" if count != 1 else str(start)


def _zero_context_hunk(header: str, body: list[str]) -> list[str]:
    """The runs of changed lines of one hunk, each as its own hunk without context lines."""
    m = _HUNK.match(header)
    if m is None:
        raise ValueError(f"not a hunk header: {header!r}")
    old, new = int(m.group(1)), int(m.group(3))
    out: list[str] = []
    run: list[str] = []
    run_old = run_new = removed = added = 0

    def flush() -> None:
        if run:
            out.append(f"@@ -{_range(run_old, removed)} +{_range(run_new, added)} @@")
            out.extend(run)

    for line in body:
        if line.startswith("\\"):  # "\ No newline at end of file" belongs to the line before
            (run if run else out).append(line)
            continue
        if line.startswith(("-", "+")):
            if not run:
                run_old, run_new, removed, added = old, new, 0, 0
            run.append(line)
            removed, old = (removed + 1, old + 1) if line[0] == "-" else (removed, old)
            added, new = (added + 1, new + 1) if line[0] == "+" else (added, new)
            continue
        flush()
        run = []
        old, new = old + 1, new + 1
    flush()
    return out


def zero_context_patch(patch: str) -> str:
    """`patch` (unified diff) with its context lines removed and each run of changes its own
    hunk, for `git apply --unidiff-zero`. `diff --git`/`index` lines go (git applies the
    `---`/`+++` form); other extended headers (new file, modes, renames) stay."""
    lines = patch.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("@@"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith(("@@", "diff --git ", "--- ")):
                j += 1
            out += _zero_context_hunk(line, lines[i + 1 : j])
            i = j
            continue
        if not line.startswith(_DROPPED_HEADERS) or _extended(lines, i):
            out.append(line)
        i += 1
    return "\n".join(out) + "\n"


def _extended(lines: list[str], i: int) -> bool:
    """Whether the `diff --git` line at `i` opens a section with extended headers (kept)."""
    if not lines[i].startswith("diff --git "):
        return False
    for line in lines[i + 1 :]:
        if line.startswith(("--- ", "diff --git ", "@@")):
            return False
        if not line.startswith("index "):
            return True
    return False


def apply_command(patch: str) -> str:
    """A shell command that applies `patch` (a here-document with a delimiter it cannot end)."""
    body = zero_context_patch(patch)
    delim = "EOF"
    while any(line == delim for line in body.splitlines()):
        delim += "_"
    return f"git apply --unidiff-zero <<'{delim}'\n{body}{delim}"


def oracle_replies(task: Task, scaffold: str) -> list[str]:
    """The oracle's replies to `task` in the `scaffold` action format: apply, then submit."""
    if not task.patch.strip():
        raise ValueError(f"{task.instance_id}: no gold patch to apply")
    command = apply_command(task.patch)
    if scaffold == "bash":
        return [f"```bash\n{command}\n```", f"```bash\necho {SUBMIT_SENTINEL}\n```"]
    if scaffold == "tools":
        call = json.dumps({"name": "bash", "arguments": {"command": command}})
        return [f"<tool_call>\n{call}\n</tool_call>",
                '<tool_call>\n{"name": "submit", "arguments": {}}\n</tool_call>']
    raise ValueError(f"no oracle replies for scaffold {scaffold!r}")


async def oracle_trajectory(task: Task, farm, tokenizer, agent: AgentConfig) -> Trajectory:
    """One oracle episode of `task` in a fresh sandbox of `farm`, through the real agent loop.
    Raises ValueError when the oracle did not submit a patch (nothing to learn from)."""
    from swefleet.agents.loop import run_episode
    from swefleet.agents.scripted import ScriptedModel

    replies = oracle_replies(task, agent.scaffold)
    longest = max(len(tokenizer.encode(r)) + 1 for r in replies)
    agent = agent.model_copy(update={"max_tokens_per_turn": max(agent.max_tokens_per_turn,
                                                                longest)})
    model = ScriptedModel(tokenizer, replies, logprob=0.0)
    async with farm.acquire(task) as sandbox:
        traj = await run_episode(task, sandbox, model, tokenizer, agent,
                                 episode_id=f"oracle-{uuid.uuid4().hex[:8]}")
    if traj.status != EpisodeStatus.unresolved or not traj.model_patch.strip():
        raise ValueError(f"{task.instance_id}: the oracle episode ended {traj.status.value} "
                         f"({traj.reason or 'no patch'}): the gold patch did not apply")
    traj.reward = 1.0
    return traj


async def oracle_trajectories(
    tasks: list[Task], farm, tokenizer, agent: AgentConfig, concurrency: int = 2,
    on_done: Callable[[Trajectory], None] | None = None,
) -> list[Trajectory]:
    """Oracle episodes of every task, `concurrency` at a time, in task order."""
    limit = asyncio.Semaphore(concurrency)

    async def one(task: Task) -> Trajectory:
        async with limit:
            traj = await oracle_trajectory(task, farm, tokenizer, agent)
        if on_done is not None:
            on_done(traj)
        return traj

    return list(await asyncio.gather(*(one(t) for t in tasks)))
