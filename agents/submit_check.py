"""The check at submit (`[agent] check_reproduction_at_submit`): before the first submit of an
episode is accepted, the issue's own reproduction script runs on the agent's code; when it still
fails, the submit is refused once and the agent is shown the run.

The script is the one the issue gives (saved again at `CHECK_PATH`, so an agent that edited or
removed `/tmp/repro.py` is still checked against the issue's), run in a subshell from the
repository's folder, so the agent's shell keeps its folder and variables. It uses nothing the
agent was not given: the grade still comes from the hidden tests, whatever the script says.
"""

from __future__ import annotations

import asyncio
import shlex

from swefleet.envs.protocol import CommandResult, Sandbox
from swefleet.envs.synth.repro import attached

CHECK_PATH = "/tmp/repro_from_issue.py"
"""Where the check saves the issue's script (not `/tmp/repro.py`, which is the agent's)."""


def issue_script(problem_statement: str) -> str:
    """The reproduction script of an issue ('' when it has none)."""
    return attached(problem_statement)[1]


def check_command(workdir: str) -> str:
    """Run `CHECK_PATH` from `workdir` in a subshell (the agent's shell state is untouched)."""
    return f"(cd {shlex.quote(workdir)} && python3 {CHECK_PATH})"


async def run_issue_script(sandbox: Sandbox, script: str, timeout_s: float) -> CommandResult:
    """The issue's `script`, saved at `CHECK_PATH` and run from the sandbox's repository;
    `timeout_s` bounds the save and the run each."""
    async with asyncio.timeout(timeout_s):
        await sandbox.write_file(CHECK_PATH, script.encode())
    return await sandbox.run(check_command(sandbox.workdir), timeout_s=timeout_s)
