"""The multi-turn agent loop, token-exact.

The context is a list of token ids that only grows: the initial prompt is tokenized once, each
completion is appended exactly as the server generated it, and each observation is tokenized
once as a ChatML delta (`agents.chat`). Nothing is ever re-rendered or re-tokenized, so turn i's
full prompt is always the exact extension of turn i-1's prompt + completion. The one exception
is `on_context_full = "compact"` (`agents.context`): the context is then replaced by a fresh
rendering and the turn generated on it is flagged `new_sample`, starting a new training sample.

A MoE server's `routed_experts` covers the whole request; each turn stores only the rows its
sample's earlier turns do not hold (`Turn.routed_experts_start`), so an episode file grows with
the context, not with turns x context. A malformed array is a server contract violation.

Every episode ends with one `EpisodeStatus`; the trajectory is returned in every case except
`asyncio.CancelledError`, which is recorded (and handed to `on_end`) and then re-raised.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Callable

from swefleet.agents.chat import ChatML
from swefleet.agents.config import AgentConfig
from swefleet.agents.context import compacted_prompt
from swefleet.agents.protocol import Action, ChatTokenizer, FormatError, Observation
from swefleet.agents.scaffolds import make_scaffold
from swefleet.agents.submit_check import issue_script, run_issue_script
from swefleet.envs.protocol import DiskBudgetExceeded, RepositoryBroken, Sandbox
from swefleet.envs.synth.repro import SCRIPT_PATH, attached
from swefleet.inference.protocol import CancelReason, Completion, ModelClient, RequestCancelled

from swefleet import routed_experts
from swefleet.types import NON_SCORABLE, EpisodeStatus, Task, Trajectory, Turn

_CANCEL_STATUS = {
    CancelReason.timeout: EpisodeStatus.model_timeout,
    CancelReason.stale: EpisodeStatus.dropped_stale,
    CancelReason.shutdown: EpisodeStatus.cancelled,
}
"""RequestCancelled reason -> episode status; any other reason is an infra_error."""

UNDECODABLE = "the reply contains bytes that are not valid UTF-8"
"""Format error of a reply whose token ids are not valid UTF-8. Judged on the ids, not the text:
a U+FFFD the model wrote (e.g. copied from a file or from output the sandbox decoded with
replacement) is an ordinary character and reaches the sandbox intact."""


class _End(Exception):
    """Internal control flow: the episode ends with `status`."""

    def __init__(self, status: EpisodeStatus, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


async def run_episode(
    task: Task,
    sandbox: Sandbox,
    model: ModelClient,
    tokenizer: ChatTokenizer,
    config: AgentConfig,
    episode_id: str,
    group_id: str = "",
    deadline_s: float | None = None,
    *,
    on_end: Callable[[Trajectory], None] | None = None,
    min_policy_version: int | None = None,
) -> Trajectory:
    """Run one episode of `task` in `sandbox` and return its trajectory.

    `deadline_s` is an absolute `time.monotonic()` time; the episode ends with `limit_time` at
    the earlier of it and `config.episode_timeout_s` after the start. After a submission the
    status is `unresolved` with reward None: the orchestrator grades and sets status + reward.
    `on_end` is called with the finished trajectory in every case, cancellation included.
    `min_policy_version` (else `config.min_policy_version`, else 0) is sent with every request.
    """
    episode = _Episode(task, sandbox, model, tokenizer, config, episode_id, group_id)
    if min_policy_version is not None:
        episode.min_version = min_policy_version
    return await drive_episode(episode, deadline_s, on_end)


async def drive_episode(
    episode: _Episode, deadline_s: float | None, on_end: Callable[[Trajectory], None] | None
) -> Trajectory:
    """Run `episode` to its one status (the fault boundary of `run_episode`, shared by the chat
    loop `agents.chat_loop`), collect its patch, and return its trajectory."""
    start = time.monotonic()
    episode.deadline = _deadline(episode.config, deadline_s, start)
    traj = episode.traj
    try:
        await episode.run_until_deadline(start)
    except _End as end:
        _finish(traj, end.status, end.reason)
    except DiskBudgetExceeded as exc:  # the agent's doing, not infra
        _finish(traj, EpisodeStatus.limit_disk, str(exc))
    except RequestCancelled as exc:
        _finish(traj, _CANCEL_STATUS.get(exc.reason, EpisodeStatus.infra_error), _describe(exc))
    except asyncio.CancelledError:
        _finish(traj, EpisodeStatus.cancelled, "episode task was cancelled")
        raise
    except Exception as exc:  # noqa: BLE001 - the episode's one fault boundary: infra
        _finish(traj, EpisodeStatus.infra_error, _describe(exc))
    finally:
        try:
            if traj.status != EpisodeStatus.cancelled:
                await episode.collect_patch()
        finally:  # also when cancelled while collecting the patch
            traj.timings.update(
                model=episode.model_s, env=episode.env_s, total=time.monotonic() - start
            )
            if on_end is not None:
                on_end(traj)
    return traj


class _Episode:
    """State of one running episode: the token context, counters and timings."""

    def __init__(
        self,
        task: Task,
        sandbox: Sandbox,
        model: ModelClient,
        tokenizer: ChatTokenizer,
        config: AgentConfig,
        episode_id: str,
        group_id: str,
    ) -> None:
        self.task, self.sandbox, self.model, self.config = task, sandbox, model, config
        self.chat = ChatML(tokenizer)
        self.scaffold = make_scaffold(config)
        self.traj = Trajectory(episode_id=episode_id, task_id=task.instance_id, group_id=group_id)
        self.context: list[int] = []
        """Every token the model has seen or generated so far in the current sample."""
        self.pending: list[int] = []
        """Tokens to append before the next model call (the next turn's prompt_ids)."""
        self.format_errors = 0
        self.repeats = RepeatCounter()
        self.min_version = config.min_policy_version or 0
        self.system = ""
        self.instance = ""
        self.deadline: float | None = None
        self.model_s = 0.0
        self.env_s = 0.0

    async def run_until_deadline(self, start: float) -> None:
        if self.deadline is None:
            await self.run()
            return
        try:
            async with asyncio.timeout(self.deadline - time.monotonic()) as scope:
                await self.run()
        except TimeoutError:
            if not scope.expired():
                raise
            raise _End(EpisodeStatus.limit_time, _time_reason(self.deadline, start)) from None

    async def run(self) -> None:
        shown = await self.shown_task()
        self.system = self.scaffold.system_prompt(shown)
        self.instance = self.scaffold.instance_prompt(shown)
        self.pending = self.chat.initial_prompt(self.system, self.instance)
        while True:
            if len(self.traj.turns) >= self.config.max_steps:
                raise _End(EpisodeStatus.limit_steps, f"reached max_steps={self.config.max_steps}")
            turn = await self.generate()
            self.traj.turns.append(turn)
            await self.act(turn)

    async def shown_task(self) -> Task:
        """The task as the agent is shown it: with `attach_reproduction`, the issue's
        reproduction script is saved in the sandbox first and its section says so."""
        return await shown_task(self.task, self.sandbox, self.config)

    async def generate(self) -> Turn:
        """One model call on `context + pending` (or on a compacted prompt, which starts a new
        sample); the completion is appended as generated."""
        new_sample = self.compact_if_full()
        covered = max(len(self.context) - 1, 0)  # routed-expert rows earlier turns hold
        prompt = self.context + self.pending
        room = self.config.context_budget_tokens - len(prompt)
        if room < 1:
            raise _End(
                EpisodeStatus.limit_tokens,
                f"context of {len(prompt)} tokens leaves no room in the budget of "
                f"{self.config.context_budget_tokens}",
            )
        max_tokens = min(self.config.max_tokens_per_turn, room)
        t0 = time.monotonic()
        try:
            completion = await self.model.generate(
                prompt,
                max_tokens=max_tokens,
                episode_id=self.traj.episode_id,
                min_policy_version=self.min_version,
            )
        finally:
            latency = time.monotonic() - t0
            self.model_s += latency
        _check_completion(completion, max_tokens)
        turn = _turn(self.pending, completion, latency)
        turn.new_sample = new_sample
        if completion.routed_experts is not None:  # keep only the rows this turn adds
            n_tokens = len(prompt) + len(completion.completion_ids)
            turn.routed_experts = await asyncio.to_thread(
                routed_experts.trim, completion.routed_experts, n_tokens, covered
            )
            turn.routed_experts_start = covered
        self.context = prompt + turn.completion_ids
        self.pending = []
        return turn

    def compact_if_full(self) -> bool:
        """With `on_context_full = "compact"`: when less than `max_tokens_per_turn` is left,
        replace the context by a fresh rendering that leaves room for a full reply (else keep
        it; the budget then ends the episode as with `stop`). Returns True when it did."""
        cfg = self.config
        if cfg.on_context_full != "compact" or not self.traj.turns:
            return False
        room = cfg.context_budget_tokens - len(self.context) - len(self.pending)
        if room >= cfg.max_tokens_per_turn:
            return False
        fresh = compacted_prompt(self.chat, self.system, self.instance, self.traj.turns, cfg)
        if fresh is None:
            return False
        self.context, self.pending = [], fresh
        return True

    def parse_action(self, turn: Turn) -> Action:
        """The turn's action; FormatError for a malformed reply."""
        if not self.chat.completion_is_utf8(turn.completion_ids):
            raise FormatError(UNDECODABLE)
        text = self.chat.completion_text(turn.completion_ids)
        return self.scaffold.parse_action(text, turn.finish_reason)

    async def act(self, turn: Turn) -> None:
        """Parse the reply, carry out its action, and queue the observation delta."""
        try:
            action = self.parse_action(turn)
        except FormatError as error:
            self.format_error(turn, error)
            return
        self.format_errors = 0
        turn.action = action.describe()
        if action.submit:
            await self.submit(turn)
            return
        observation = await self.execute(turn, action)
        text = observation.text
        times = self.repeats.count(turn.action, text)
        if self.config.repeat_note_after is not None and times >= self.config.repeat_note_after:
            text += repeat_note(times)
        self.observe(turn, text, observation.truncated_chars)
        if observation.submitted:
            await self.submit(turn)

    async def submit(self, turn: Turn) -> None:
        """End the episode as submitted, unless the check at submit refuses it
        (`check_reproduction_at_submit`: the first submit, an issue with a reproduction that
        still fails); then the turn's observation is the refusal and the episode goes on."""
        script = issue_script(self.task.problem_statement)
        if not self.config.check_reproduction_at_submit or self.traj.refused_submits or not script:
            raise _End(EpisodeStatus.unresolved, "submitted")
        t0 = time.monotonic()
        try:
            result = await run_issue_script(self.sandbox, script, self.config.command_timeout_s)
        finally:
            elapsed = time.monotonic() - t0
            turn.action_s += elapsed
            self.env_s += elapsed
        if result.exit_code == 0:
            raise _End(EpisodeStatus.unresolved, "submitted")
        self.traj.refused_submits += 1
        text, elided = self.scaffold.refused_submit(result)
        self.observe(turn, text, elided)

    def format_error(self, turn: Turn, error: FormatError) -> None:
        self.format_errors += 1
        self.observe(turn, self.scaffold.format_error(error, turn.finish_reason))
        if self.format_errors >= self.config.max_format_errors:
            raise _End(
                EpisodeStatus.format_errors,
                f"{self.format_errors} consecutive format errors; last: {error}",
            )

    def observe(self, turn: Turn, text: str, truncated_chars: int = 0) -> None:
        turn.observation = text
        turn.observation_truncated_chars = truncated_chars
        self.pending = self.chat.observation_delta(turn.completion_ids, text)

    async def execute(self, turn: Turn, action: Action) -> Observation:
        """Let the scaffold carry out `action`; records its duration, exit code and timeout."""
        timeout = self.config.command_timeout_s
        if self.deadline is not None:
            timeout = max(0.01, min(timeout, self.deadline - time.monotonic()))
        t0 = time.monotonic()
        try:
            observation = await self.scaffold.execute(action, self.sandbox, timeout)
        finally:
            turn.action_s = time.monotonic() - t0
            self.env_s += turn.action_s
        turn.exit_code = observation.exit_code
        turn.action_timed_out = observation.timed_out
        return observation

    async def collect_patch(self) -> None:
        """Fill `model_patch` from the sandbox. A failed diff means the sandbox broke and the
        patch is unknown: a scorable status becomes infra_error (its old status and reason are
        kept in `reason`), so a broken sandbox is never graded as reward 0 — unless the agent
        did it: the farm removed the sandbox for its disk budget (`limit_disk`), or the agent
        broke the repository (`RepositoryBroken`: graded as an empty patch, reward 0)."""
        t0 = time.monotonic()
        try:
            async with asyncio.timeout(self.config.command_timeout_s):
                self.traj.model_patch = await self.sandbox.diff()
        except DiskBudgetExceeded as exc:
            if self.traj.status not in NON_SCORABLE:
                _finish(self.traj, EpisodeStatus.limit_disk, str(exc))
        except RepositoryBroken as exc:  # the agent broke git: graded as no patch (reward 0)
            self.traj.model_patch = ""
            self.traj.reason = f"{self.traj.reason}; no patch: {_describe(exc)}".lstrip("; ")
        except asyncio.CancelledError:  # the patch is unknown: never graded
            before = f"{self.traj.status.value}: {self.traj.reason}"
            _finish(
                self.traj, EpisodeStatus.cancelled, f"cancelled during the diff (after {before})"
            )
            raise
        except Exception as exc:  # noqa: BLE001 - fault boundary of the patch step
            detail = f"diff failed: {_describe(exc)}"
            if self.traj.status in NON_SCORABLE:
                self.traj.reason = f"{self.traj.reason}; {detail}"
            else:
                before = f"{self.traj.status.value}: {self.traj.reason}"
                _finish(self.traj, EpisodeStatus.infra_error, f"{detail} (after {before})")
        finally:
            self.env_s += time.monotonic() - t0


def attached_task(task: Task, config: AgentConfig) -> tuple[Task, str]:
    """`task` as its agent sees it, and the script to save at `SCRIPT_PATH` before the first
    turn ('' for none): with `attach_reproduction`, the issue's reproduction section says the
    script is already saved."""
    if not config.attach_reproduction:
        return task, ""
    statement, script = attached(task.problem_statement)
    if statement == task.problem_statement:
        return task, ""
    return task.model_copy(update={"problem_statement": statement}), script


async def shown_task(task: Task, sandbox: Sandbox, config: AgentConfig) -> Task:
    """`task` as its agent sees it (`attached_task`), its attached script written."""
    shown, script = attached_task(task, config)
    if script:
        async with asyncio.timeout(config.command_timeout_s):
            await sandbox.write_file(SCRIPT_PATH, script.encode())
    return shown


def repeat_note(times: int) -> str:
    """What the agent is told when an action gave the same result `times` times."""
    return (f"\n\nNote: you have now run this same action {times} times in this episode and "
            "got the same result each time. Repeating it will not change anything: do "
            "something different (view the code again, change the arguments, or take another "
            "approach).")


class RepeatCounter:
    """How many times each (action, observation) pair has been seen in the episode: a loop
    over several actions repeats each of them as surely as a loop over one."""

    def __init__(self) -> None:
        self.seen: dict[int, int] = {}

    def count(self, action: str, observation: str) -> int:
        key = hash((action, observation))
        self.seen[key] = self.seen.get(key, 0) + 1
        return self.seen[key]


def _turn(prompt_ids: list[int], completion: Completion, latency: float) -> Turn:
    return Turn(
        prompt_ids=prompt_ids,
        completion_ids=list(completion.completion_ids),
        logprobs=list(completion.logprobs),
        policy_version=completion.policy_version,
        finish_reason=completion.finish_reason,
        latency_s=latency,
    )


def _check_completion(completion: Completion, max_tokens: int) -> None:
    """The server's answer must be token-exact and within the request."""
    n_ids, n_logprobs = len(completion.completion_ids), len(completion.logprobs)
    if n_ids != n_logprobs:
        raise ValueError(f"server returned {n_logprobs} logprobs for {n_ids} tokens")
    if n_ids > max_tokens:
        raise ValueError(f"server returned {n_ids} tokens for max_tokens={max_tokens}")
    if not math.isfinite(sum(completion.logprobs)):  # JSON would store null: unreadable
        raise ValueError("server returned non-finite logprobs (NaN or infinite)")


def _deadline(config: AgentConfig, deadline_s: float | None, start: float) -> float | None:
    candidates = [deadline_s]
    if config.episode_timeout_s is not None:
        candidates.append(start + config.episode_timeout_s)
    present = [c for c in candidates if c is not None]
    return min(present) if present else None


def _time_reason(deadline: float, start: float) -> str:
    return f"episode deadline reached after {deadline - start:.1f}s"


def _finish(traj: Trajectory, status: EpisodeStatus, reason: str) -> None:
    traj.status = status
    traj.reason = reason
    traj.reward = None


def _describe(exc: BaseException) -> str:
    message = str(exc)
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__
