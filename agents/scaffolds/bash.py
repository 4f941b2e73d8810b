"""Bash-only scaffold (mini-swe-agent style): one ```bash block per reply, one command per turn.

Submission convention: the agent runs `echo SWEFLEET_SUBMIT`; a command whose output's first
line is exactly the sentinel and whose exit code is 0 submits. The submission is the sandbox's
`git diff`, collected by the loop.
"""

from __future__ import annotations

import re

from swefleet.agents.config import AgentConfig
from swefleet.agents.prompts import render, strip_thinking, truncate_middle
from swefleet.agents.protocol import Action, FormatError, Observation
from swefleet.envs.protocol import CommandResult, Sandbox

from swefleet.types import Task

SUBMIT_SENTINEL = "SWEFLEET_SUBMIT"
_BLOCK = re.compile(r"```bash[ \t]*\n(.*?)```", re.DOTALL)


class BashScaffold:
    """Implements `agents.protocol.Scaffold` with fenced bash blocks."""

    def __init__(self, config: AgentConfig) -> None:
        self.config = config

    def system_prompt(self, task: Task) -> str:
        return render(
            "bash/system.j2",
            task=task,
            submit_sentinel=SUBMIT_SENTINEL,
            command_timeout_s=self.config.command_timeout_s,
        )

    def instance_prompt(self, task: Task) -> str:
        return render("bash/instance.j2", task=task)

    def parse_action(self, text: str, finish_reason: str) -> Action:
        blocks = _BLOCK.findall(strip_thinking(text))
        if not blocks:
            raise FormatError("no ```bash block found")
        if len(blocks) > 1:
            raise FormatError(f"found {len(blocks)} ```bash blocks; exactly one is allowed")
        command = blocks[0].strip()
        if not command:
            raise FormatError("the ```bash block is empty")
        return Action(command=command)

    async def execute(self, action: Action, sandbox: Sandbox, timeout_s: float) -> Observation:
        return self.observe(action, await sandbox.run(action.command, timeout_s=timeout_s))

    def observe(self, action: Action, result: CommandResult) -> Observation:
        text, elided = render_command_result(result, self.config.observation_max_chars)
        return Observation(
            text=text,
            truncated_chars=elided,
            submitted=is_submission(result),
            exit_code=result.exit_code,
            timed_out=result.timed_out,
        )

    def format_error(self, error: FormatError, finish_reason: str) -> str:
        return render(
            "bash/format_error.j2",
            error=str(error),
            finish_reason=finish_reason,
            submit_sentinel=SUBMIT_SENTINEL,
        )

    def refused_submit(self, result: CommandResult) -> tuple[str, int]:
        return refused_submit_text(result, self.config.observation_max_chars,
                                   f"run `echo {SUBMIT_SENTINEL}` again")


def refused_submit_text(result: CommandResult, max_chars: int, again: str) -> tuple[str, int]:
    """What a refused submit shows (`agents.submit_check`): the issue's script's run, and how to
    submit anyway (`again`)."""
    from swefleet.agents.submit_check import CHECK_PATH

    run, elided = render_command_result(result, max_chars)
    return render("submit_refused.j2", run=run, path=CHECK_PATH, again=again), elided


def render_command_result(result: CommandResult, max_chars: int) -> tuple[str, int]:
    """`<returncode>` + `<output>` text of a command (output cut in the middle past
    `max_chars`) and the number of characters elided."""
    output, elided = truncate_middle(result.output, max_chars)
    return render("bash/observation.j2", result=result, output=output, elided_chars=elided), elided


def is_submission(result: CommandResult) -> bool:
    """First output line is exactly the sentinel and the command exited 0."""
    lines = result.output.lstrip().splitlines()
    return result.exit_code == 0 and bool(lines) and lines[0].strip() == SUBMIT_SENTINEL
