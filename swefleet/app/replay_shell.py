"""After a restore: an interactive shell in the sandbox, or its state printed.

Docker: `docker exec -it` into the container as the sandbox user, in the workdir. bwrap: the
box's own entry (`Box.argv`: nsenter into its namespaces, its rlimits) running `bash -i`.
While the shell runs, Ctrl-C belongs to it: this process only notes it (a handler, not
SIG_IGN, so the shell gets the default back when it starts).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import signal
import sys
from typing import Any

from swefleet.agents.replay import ReplayedTurn


def shell_argv(sb: Any, config: Any) -> tuple[list[str], str]:
    """The host command of an interactive shell in `sb`, or `([], why not)`."""
    if not sys.stdin.isatty() or not sys.stdout.isatty():
        return [], "no terminal"
    term = os.environ.get("TERM", "xterm")
    box = getattr(sb, "box", None)
    if box is not None:  # bwrap
        return box.argv(["env", f"TERM={term}", "bash", "-i"]), ""
    if config.hosts:
        return [], "the sandbox runs on a remote Docker host (envs.hosts)"
    if shutil.which("docker") is None:
        return [], "no `docker` command on this machine"
    env = [a for k, v in config.session_env.items() if k != "TERM"
           for a in ("-e", f"{k}={v}")]
    return ["docker", "exec", "-it", "-u", sb.limits.user, "-w", sb.workdir, *env,
            "-e", f"TERM={term}", sb.container_id, "bash", "-i"], ""


async def interactive_shell(argv: list[str]) -> int:
    """Run the shell in the foreground; its exit code."""
    previous = signal.signal(signal.SIGINT, lambda *_: None)
    try:
        proc = await asyncio.create_subprocess_exec(*argv)
        return await proc.wait()
    finally:
        signal.signal(signal.SIGINT, previous)


def match_table(steps: list[ReplayedTurn]) -> list[str]:
    """One line per replayed turn: its index, match, exit codes, seconds, action."""
    lines = [f"{'turn':>4}  {'match':<5}  {'exit':>9}  {'s':>6}  action"]
    for s in steps:
        codes = f"{_code(s.recorded_exit_code)}/{_code(s.replayed_exit_code)}"
        action = s.action.splitlines()[0][:60] if s.action else ""
        lines.append(f"{s.turn:>4}  {'yes' if s.matches else 'NO':<5}  {codes:>9}  "
                     f"{s.seconds:>6.2f}  {action}")
    return lines


def _code(code: int | None) -> str:
    return "-" if code is None else str(code)


async def state_lines(sb: Any) -> list[str]:
    """`git status --short` and `git diff --stat` in the workdir."""
    out = []
    for title in ("git status --short", "git diff --stat"):
        result = await sb.run(f"cd {shlex.quote(sb.workdir)} && {title}", timeout_s=60)
        out += [f"$ {title}", *(result.output.rstrip("\n").splitlines() or ["(nothing)"])]
    return out
