"""agents.loop.run_episode with the ScriptedModel, the real tokenizer and a local shell sandbox:
every ending status, format errors, limits, and token-exact turns."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

import pytest
from swefleet.agents.chat import ChatML
from swefleet.agents.config import AgentConfig
from swefleet.agents.loop import run_episode
from swefleet.agents.scaffolds import SUBMIT_SENTINEL, BashScaffold
from swefleet.agents.scripted import ScriptedModel, ScriptedReply
from swefleet.envs.protocol import DiskBudgetExceeded, InfraError
from swefleet.inference.protocol import CancelReason, Completion, RequestCancelled

from swefleet.types import EpisodeStatus, Task, Trajectory

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ holds shared helpers
from local_sandbox import LocalShellSandbox

pytestmark = pytest.mark.unit

TASK = Task(instance_id="demo__demo-1", repo="demo/demo", problem_statement="greet() is rude.")
FILES = {"greet.py": "def greet():\n    return 'go away, rude'\n"}
SUBMIT = f"```bash\necho {SUBMIT_SENTINEL}\n```"


def bash(command: str) -> str:
    return f"Next step.\n```bash\n{command}\n```"


@pytest.fixture
def sandbox(tmp_path) -> LocalShellSandbox:
    return LocalShellSandbox.create(tmp_path / "repo", FILES)


async def play(tok, sandbox, script, *, episode_id="ep-0", deadline_s=None, **config):
    model = ScriptedModel(tok, script, version=7)
    cfg = AgentConfig(**{"command_timeout_s": 10.0, **config})
    traj = await run_episode(TASK, sandbox, model, tok, cfg, episode_id, "g-0", deadline_s)
    return traj, model


def assert_token_exact(traj: Trajectory, model: ScriptedModel) -> None:
    """Each request's prompt == all earlier prompt_ids+completion_ids + this turn's prompt_ids,
    so every prompt is the exact extension of the previous prompt + completion."""
    prompts = [r.prompt_ids for r in model.requests if r.episode_id == traj.episode_id]
    unanswered = prompts[len(traj.turns) :]  # a request that ended the episode (timeout, ...)
    assert len(unanswered) <= 1
    context: list[int] = []
    for turn, prompt in zip(traj.turns, prompts, strict=False):
        assert prompt[: len(context)] == context
        assert prompt == context + turn.prompt_ids
        context = prompt + turn.completion_ids
    assert traj.n_tokens == len(context)
    for prompt in unanswered:
        assert prompt[: len(context)] == context and len(prompt) > len(context)


def running(cmdline_part: str) -> bool:
    """Whether any process's /proc cmdline contains `cmdline_part` (NUL-separated args)."""
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if cmdline_part in proc.joinpath("cmdline").read_bytes().decode(errors="replace"):
                return True
        except OSError:
            continue
    return False


# ---------------------------------------------------------------- every status, one table


class BrokenSandbox(LocalShellSandbox):
    async def run(self, command, timeout_s=None):
        raise InfraError("container died")


class OverBudgetSandbox(LocalShellSandbox):
    """The farm removed it for its disk budget: every operation raises DiskBudgetExceeded."""

    async def run(self, command, timeout_s=None):
        raise DiskBudgetExceeded("disk budget exceeded: 70 MiB > 64 MiB")

    async def diff(self):
        raise DiskBudgetExceeded("disk budget exceeded: 70 MiB > 64 MiB")


SCENARIOS = {
    EpisodeStatus.unresolved: ([bash("ls"), SUBMIT], {}),
    EpisodeStatus.limit_steps: ([bash("ls")] * 5, {"max_steps": 3}),
    EpisodeStatus.limit_tokens: (
        [bash("seq 1 5000")] * 30,
        {"context_budget_tokens": 1500, "max_tokens_per_turn": 64, "observation_max_chars": 400},
    ),
    EpisodeStatus.limit_time: (
        [ScriptedReply(text=SUBMIT, delay_s=30)],
        {"episode_timeout_s": 0.3},
    ),
    EpisodeStatus.format_errors: (["no block", "still none", "nope"], {"max_format_errors": 3}),
    EpisodeStatus.model_timeout: ([RequestCancelled(CancelReason.timeout, "600s")], {}),
    EpisodeStatus.dropped_stale: ([RequestCancelled(CancelReason.stale, "v7 < v9")], {}),
    EpisodeStatus.infra_error: ([bash("ls")], {"sandbox": BrokenSandbox}),
    EpisodeStatus.limit_disk: ([bash("ls")], {"sandbox": OverBudgetSandbox}),
    EpisodeStatus.cancelled: ([RequestCancelled(CancelReason.shutdown)], {}),
}


def test_scenarios_cover_every_status_the_loop_sets():
    assert set(SCENARIOS) == set(EpisodeStatus) - {EpisodeStatus.resolved}  # resolved: grader


@pytest.mark.parametrize("status", list(SCENARIOS), ids=str)
async def test_every_status_is_reached_and_recorded(tok, tmp_path, status):
    script, config = SCENARIOS[status]
    config = dict(config)
    sandbox = config.pop("sandbox", LocalShellSandbox).create(tmp_path / "repo", FILES)
    start = time.monotonic()
    traj, model = await play(tok, sandbox, script, **config)
    assert traj.status == status, traj.reason
    assert traj.reason and traj.reward is None
    assert {"model", "env", "total"} <= traj.timings.keys()
    assert time.monotonic() - start < 10
    assert_token_exact(traj, model)
    roundtrip = Trajectory.model_validate_json(traj.model_dump_json())
    assert roundtrip == traj


# ---------------------------------------------------------------- token exactness


async def test_submit_episode_is_token_exact_and_carries_patch(tok, sandbox):
    script = [bash("cat greet.py"), bash("sed -i 's/go away, rude/hello/' greet.py"), SUBMIT]
    traj, model = await play(tok, sandbox, script)
    assert traj.status == EpisodeStatus.unresolved and traj.reason == "submitted"
    assert traj.reward is None and traj.task_id == TASK.instance_id and traj.group_id == "g-0"
    assert "-    return 'go away, rude'" in traj.model_patch
    assert "+    return 'hello'" in traj.model_patch
    assert [t.action for t in traj.turns] == [
        "cat greet.py",
        "sed -i 's/go away, rude/hello/' greet.py",
        f"echo {SUBMIT_SENTINEL}",
    ]
    assert "go away, rude" in traj.turns[0].observation
    assert_token_exact(traj, model)
    for turn, text in zip(traj.turns, script, strict=True):
        assert turn.completion_ids == [*tok.encode(text), tok.im_end_id]
        assert turn.logprobs == [-0.5] * len(turn.completion_ids)
        assert turn.policy_version == 7 and turn.finish_reason == "stop" and turn.latency_s >= 0
    # the first turn holds the whole initial prompt; later deltas only the observation
    scaffold = BashScaffold(AgentConfig(command_timeout_s=10.0))
    initial = ChatML(tok).initial_prompt(
        scaffold.system_prompt(TASK), scaffold.instance_prompt(TASK)
    )
    assert traj.turns[0].prompt_ids == initial
    # the context decodes to the exact ChatML conversation
    rendered = tok.decode(model.prompts[-1])
    expected = tok.decode(initial)
    for turn, text in zip(traj.turns[:-1], script, strict=False):
        expected += f"{text}<|im_end|>\n<|im_start|>user\n{turn.observation}<|im_end|>\n"
        expected += "<|im_start|>assistant\n"
    assert rendered == expected


async def test_length_cut_reply_is_closed_in_next_delta(tok, sandbox):
    long_reply = "```bash\necho " + "word " * 200 + "\n```"
    traj, model = await play(tok, sandbox, [long_reply, SUBMIT], max_tokens_per_turn=40)
    assert traj.status == EpisodeStatus.unresolved
    first, second = traj.turns
    assert first.finish_reason == "length" and len(first.completion_ids) == 40
    assert tok.im_end_id not in first.completion_ids
    assert first.action == "" and "token limit" in first.observation
    assert second.prompt_ids[0] == tok.im_end_id  # end-of-turn appended exactly once
    assert second.completion_ids[-1] == tok.im_end_id
    assert_token_exact(traj, model)


async def test_concurrent_episodes_share_a_model_and_stay_exact(tok, tmp_path):
    model = ScriptedModel(tok, [bash("ls"), bash("cat greet.py"), SUBMIT])
    boxes = [LocalShellSandbox.create(tmp_path / f"r{i}", FILES) for i in range(3)]
    cfg = AgentConfig(command_timeout_s=10.0)
    trajs = await asyncio.gather(
        *(run_episode(TASK, b, model, tok, cfg, f"ep-{i}", "g") for i, b in enumerate(boxes))
    )
    assert [t.status for t in trajs] == [EpisodeStatus.unresolved] * 3
    for traj in trajs:
        assert_token_exact(traj, model)


# ---------------------------------------------------------------- format errors


async def test_malformed_outputs_get_format_error_observations(tok, sandbox):
    broken_utf8 = ScriptedReply(ids=[*tok.encode("```bash\necho 😀\n```")[:-3], tok.im_end_id])
    bad_bytes = [*tok.encode("```bash\necho "), *tok.encode("😀")[:1], *tok.encode("\n```")]
    script = [
        "I think the bug is in greet.",
        "```bash\nls\n```\n```bash\npwd\n```",
        ScriptedReply(ids=[*bad_bytes, tok.im_end_id]),
        broken_utf8,
    ]
    traj, model = await play(tok, sandbox, script, max_format_errors=3)
    assert traj.status == EpisodeStatus.format_errors
    assert "3 consecutive format errors" in traj.reason
    assert len(traj.turns) == 3 and sandbox.commands == []
    messages = ["no ```bash block", "found 2", "not valid UTF-8"]
    for turn, message in zip(traj.turns, messages, strict=True):
        assert turn.action == ""
        assert turn.observation.startswith("Format error") and message in turn.observation
    assert_token_exact(traj, model)


async def test_format_error_budget_counts_consecutive_errors_only(tok, sandbox):
    script = ["oops", bash("ls"), "oops", bash("ls"), "oops", SUBMIT]
    traj, _ = await play(tok, sandbox, script, max_format_errors=2)
    assert traj.status == EpisodeStatus.unresolved and len(traj.turns) == 6


# ---------------------------------------------------------------- limits


async def test_context_budget_bounds_every_request(tok, sandbox):
    budget = 1500
    script = [bash("seq 1 5000")] * 30
    traj, model = await play(
        tok,
        sandbox,
        script,
        context_budget_tokens=budget,
        max_tokens_per_turn=64,
        observation_max_chars=400,
    )
    assert traj.status == EpisodeStatus.limit_tokens
    for request in model.requests:
        assert len(request.prompt_ids) + request.max_tokens <= budget
    assert traj.turns[0].observation_truncated_chars > 0
    assert "characters elided" in traj.turns[0].observation
    assert traj.n_tokens <= budget


async def test_deadline_argument_is_absolute_and_tightens(tok, sandbox):
    script = [ScriptedReply(text=SUBMIT, delay_s=30)]
    start = time.monotonic()
    traj, _ = await play(tok, sandbox, script, deadline_s=start + 0.3, episode_timeout_s=None)
    assert traj.status == EpisodeStatus.limit_time
    assert time.monotonic() - start < 5


async def test_episode_deadline_kills_running_command(tok, sandbox):
    script = [bash("sleep 31.7"), ScriptedReply(text=SUBMIT, delay_s=30)]
    start = time.monotonic()
    traj, _ = await play(tok, sandbox, script, episode_timeout_s=0.5, command_timeout_s=60)
    assert traj.status == EpisodeStatus.limit_time
    assert time.monotonic() - start < 5
    await asyncio.sleep(0.1)
    assert not running("sleep\x0031.7")


async def test_command_timeout_is_an_observation_not_an_end(tok, sandbox):
    traj, _ = await play(tok, sandbox, [bash("sleep 31.3"), SUBMIT], command_timeout_s=0.3)
    assert traj.status == EpisodeStatus.unresolved
    assert "timed out" in traj.turns[0].observation


# ---------------------------------------------------------------- failures


async def test_model_timeout_after_work_keeps_turns_and_patch(tok, sandbox):
    script = [bash("echo hi > new.txt"), RequestCancelled(CancelReason.timeout, "no reply")]
    traj, _ = await play(tok, sandbox, script)
    assert traj.status == EpisodeStatus.model_timeout and "no reply" in traj.reason
    assert len(traj.turns) == 1 and "+hi" in traj.model_patch


@pytest.mark.parametrize(
    "error, status",
    [
        (RequestCancelled(CancelReason.overload), EpisodeStatus.infra_error),
        (RequestCancelled(CancelReason.server_error, "500"), EpisodeStatus.infra_error),
        (RuntimeError("boom"), EpisodeStatus.infra_error),
    ],
)
async def test_other_failures_are_infra_errors_with_type(tok, sandbox, error, status):
    traj, _ = await play(tok, sandbox, [error])
    assert traj.status == status
    assert traj.reason.startswith(type(error).__name__)


async def test_sandbox_infra_error_records_type_and_message(tok, tmp_path):
    sandbox = BrokenSandbox.create(tmp_path / "repo", FILES)
    traj, _ = await play(tok, sandbox, [bash("ls")])
    assert traj.status == EpisodeStatus.infra_error
    assert traj.reason == "InfraError: container died"
    assert len(traj.turns) == 1


class NoDiffSandbox(LocalShellSandbox):
    async def diff(self):
        raise InfraError("daemon gone")


@pytest.mark.parametrize(
    "script, config, before",
    [
        ([SUBMIT], {}, "unresolved: submitted"),
        ([bash("ls")], {"max_steps": 1}, "limit_steps: reached max_steps=1"),
    ],
)
async def test_diff_failure_makes_a_scorable_end_infra_error(tok, tmp_path, script, config, before):
    sandbox = NoDiffSandbox.create(tmp_path / "repo", FILES)
    traj, _ = await play(tok, sandbox, script, **config)
    assert traj.status == EpisodeStatus.infra_error
    assert traj.reason == f"diff failed: InfraError: daemon gone (after {before})"


async def test_an_agent_that_breaks_git_is_graded_as_no_patch(tok, tmp_path):
    """`rm -rf .git` must not turn a failing episode into an unscored infra_error."""
    sandbox = LocalShellSandbox.create(tmp_path / "repo", FILES)
    traj, _ = await play(tok, sandbox, [bash("rm -rf .git"), SUBMIT])
    assert traj.status == EpisodeStatus.unresolved
    assert traj.model_patch == ""
    assert "no patch: RepositoryBroken: git diff failed" in traj.reason


async def test_diff_failure_after_infra_error_keeps_first_reason(tok, tmp_path):
    class Dead(NoDiffSandbox, BrokenSandbox):
        pass

    traj, _ = await play(tok, Dead.create(tmp_path / "repo", FILES), [bash("ls")])
    assert traj.status == EpisodeStatus.infra_error
    assert traj.reason == "InfraError: container died; diff failed: InfraError: daemon gone"


async def test_server_contract_violation_is_infra_error(tok, sandbox):
    class WrongLogprobs(ScriptedModel):
        async def generate(self, prompt_ids, **kw):
            return Completion(
                completion_ids=[1, 2], logprobs=[-1.0], finish_reason="stop", policy_version=0
            )

    model = WrongLogprobs(tok, [])
    traj = await run_episode(TASK, sandbox, model, tok, AgentConfig(), "ep", "g")
    assert traj.status == EpisodeStatus.infra_error and "1 logprobs for 2 tokens" in traj.reason


async def test_cancellation_is_recorded_then_reraised(tok, sandbox):
    model = ScriptedModel(tok, [bash("ls"), ScriptedReply(text=SUBMIT, delay_s=30)])
    ended: list[Trajectory] = []
    task = asyncio.create_task(
        run_episode(TASK, sandbox, model, tok, AgentConfig(), "ep", "g", on_end=ended.append)
    )
    while len(model.requests) < 2:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    (traj,) = ended
    assert traj.status == EpisodeStatus.cancelled and len(traj.turns) == 1
    assert traj.timings["total"] > 0 and traj.model_patch == ""


# ---------------------------------------------------------------- per-turn command data


async def test_turns_record_exit_code_duration_and_timeout(tok, sandbox):
    script = [bash("sleep 0.2; exit 3"), bash("sleep 9.3"), "no block", SUBMIT]
    traj, _ = await play(tok, sandbox, script, command_timeout_s=0.5)
    assert traj.status == EpisodeStatus.unresolved
    failed, killed, malformed, submit = traj.turns
    assert (failed.exit_code, failed.action_timed_out) == (3, False)
    assert 0.2 <= failed.action_s < 3
    assert (killed.exit_code, killed.action_timed_out) == (None, True)
    assert 0.5 <= killed.action_s < 3 and "timed out" in killed.observation
    assert (malformed.exit_code, malformed.action_s, malformed.action_timed_out) == (None, 0, False)
    assert submit.exit_code == 0 and submit.action_s > 0
    assert traj.timings["env"] >= failed.action_s + killed.action_s + submit.action_s


# ---------------------------------------------------------------- min_policy_version


async def test_min_policy_version_is_sent_when_configured(tok, sandbox):
    _, default = await play(tok, sandbox, [bash("ls"), SUBMIT])
    assert [r.min_policy_version for r in default.requests] == [0, 0]
    _, floor = await play(tok, sandbox, [bash("ls"), SUBMIT], min_policy_version=5)
    assert [r.min_policy_version for r in floor.requests] == [5, 5]


async def test_min_policy_version_argument_overrides_config(tok, sandbox):
    model = ScriptedModel(tok, [bash("ls"), SUBMIT])
    cfg = AgentConfig(command_timeout_s=10.0, min_policy_version=5)
    traj = await run_episode(TASK, sandbox, model, tok, cfg, "ep", min_policy_version=9)
    assert traj.status == EpisodeStatus.unresolved
    assert [r.min_policy_version for r in model.requests] == [9, 9]


async def test_stale_answer_to_a_version_floor_is_dropped_stale(tok, sandbox):
    stale = RequestCancelled(CancelReason.stale, "generated by v3 < v5")
    traj, model = await play(tok, sandbox, [bash("ls"), stale], min_policy_version=5)
    assert traj.status == EpisodeStatus.dropped_stale and len(traj.turns) == 1
    assert model.requests[-1].min_policy_version == 5


async def test_a_repeated_action_with_the_same_result_gets_a_note(tok, sandbox):
    """The third identical (action, result) of the episode is told so, in a row or in a cycle;
    an identical command whose result changed is not a repeat."""
    grow = bash("echo x >> log.txt; wc -l < log.txt")  # same command, new output each time
    cycle = [bash("cat greet.py"), bash("ls")]
    script = [bash("cat greet.py")] * 3 + [grow] * 3 + cycle * 2 + [SUBMIT]
    traj, _ = await play(tok, sandbox, script)
    noted = ["Note: you have now run this same action" in t.observation for t in traj.turns]
    assert noted == [False, False, True, False, False, False, True, False, True, False, False]
    assert "action 3 times" in traj.turns[2].observation
    assert "action 5 times" in traj.turns[8].observation  # cat greet.py, in the cycle
    traj, _ = await play(tok, sandbox, [bash("cat greet.py")] * 4 + [SUBMIT],
                         repeat_note_after=None)
    assert not any("Note:" in t.observation for t in traj.turns)


class _RecordingSandbox(LocalShellSandbox):
    """Keeps writes outside the repository (the attached script) instead of writing them on
    the host."""

    written: dict[str, bytes]

    async def write_file(self, path: str, data: bytes) -> None:
        if path.startswith("/"):
            self.written[path] = data
            return
        await super().write_file(path, data)


@pytest.mark.parametrize("attach", [True, False])
async def test_an_issue_s_reproduction_comes_saved_when_attached(tok, tmp_path, attach):
    from swefleet.envs.synth.repro import ATTACHED, SECTION, with_reproduction

    script = "from greet import greet\nassert greet() == 'hello'\n"
    task = TASK.model_copy(update={"problem_statement": with_reproduction(
        "greet() is rude.\n\nPlease fix it.", script)})
    sandbox = _RecordingSandbox.create(tmp_path / "repo", FILES)
    sandbox.written = {}
    model = ScriptedModel(tok, [SUBMIT], version=7)
    cfg = AgentConfig(command_timeout_s=10.0, attach_reproduction=attach)
    await run_episode(task, sandbox, model, tok, cfg, "ep-0", "g-0")
    prompt = tok.decode(model.requests[0].prompt_ids)
    assert (ATTACHED in prompt, SECTION in prompt) == (attach, not attach)
    assert script.strip() in prompt
    assert sandbox.written == ({"/tmp/repro.py": script.encode()} if attach else {})
