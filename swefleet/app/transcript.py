"""One recorded episode as a transcript a person reads (`swefleet show RUN --episode ID`): the
task, then per turn the model's reply, the action it took (shell command or tool call) and what
it saw back, then how the episode ended: status, reward, grade, patch.

Long blocks keep their first and last lines and say how many were cut (`max_lines`; 0 keeps
all); a very long line keeps its first `MAX_LINE_CHARS` characters. Plain text only.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from swefleet.agents.chat_record import ChatTrajectory
from swefleet.types import GradeResult, Trajectory, Turn

MAX_LINE_CHARS = 1000
"""Characters kept of one line of a block (a minified file, a progress bar)."""
INDENT = "  "
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
"""Control characters (escape sequences of a model's output, a test's colours): shown as
`\\xNN`, never sent to the terminal."""


def clip(text: str, max_lines: int) -> list[str]:
    """`text`'s lines, at most `max_lines` of them (its first and last ones; 0: all) with a line
    that says how many were cut between them."""
    lines = [_clip_line(line) for line in text.splitlines()]
    if max_lines <= 0 or len(lines) <= max_lines:
        return lines
    head = (max_lines + 1) // 2
    tail = max_lines - head
    cut = len(lines) - max_lines
    note = f"[... {cut} of {len(lines)} lines cut here; --max-lines 0 shows all ...]"
    return [*lines[:head], note, *(lines[len(lines) - tail:] if tail else [])]


def transcript(traj: Trajectory, decode: Callable[[list[int]], str] | None, max_lines: int,
               where: str = "") -> list[str]:
    """The lines of `traj`'s transcript. `decode`: completion ids to reply text (None: no
    tokenizer, a token episode's replies show as their token counts); `where`: a note on where
    the episode was recorded."""
    group = f"   group {traj.group_id}" if traj.group_id else ""
    lines = [f"episode {traj.episode_id}   task {traj.task_id}{group}"
             + (f"   ({where})" if where else ""), _summary(traj)]
    if traj.branch_of:
        lines.append(f"branch of episode {traj.branch_of}: turns 0..{traj.branch_turn} are its "
                     "turns, replayed")
    if not traj.turns:
        lines += ["", ("no turns: the policy ran without a sandbox (an oracle, empty or "
                       "predictions eval), only its patch was graded")]
    for i, turn in enumerate(traj.turns):
        lines += ["", *_turn(traj, i, turn, decode, max_lines)]
    return [*lines, "", *_result(traj, max_lines)]


def _summary(traj: Trajectory) -> str:
    tokens = f"{traj.n_tokens} tokens" if traj.n_tokens else ""
    wall = f"{traj.timings['total']:.1f} s" if "total" in traj.timings else ""
    parts = [f"{len(traj.turns)} turns", tokens, wall]
    if traj.turns and not isinstance(traj, ChatTrajectory):
        versions = sorted(set(traj.policy_versions))
        if versions:
            span = f"v{versions[0]}" + (f"..v{versions[-1]}" if len(versions) > 1 else "")
            parts.append(f"policy {span}")
    return f"{_status(traj)}; reward {_reward(traj)}; " + ", ".join(p for p in parts if p)


def _turn(traj: Trajectory, i: int, turn: Turn, decode, max_lines: int) -> list[str]:
    chat = isinstance(traj, ChatTrajectory)
    n_out = turn.completion_tokens if chat else len(turn.completion_ids)
    facts = [f"{n_out} tokens", f"finish {turn.finish_reason}" if turn.finish_reason else "",
             f"{turn.latency_s:.2f} s" if turn.latency_s else "",
             "" if chat else f"policy v{turn.policy_version}",
             "replayed from the parent" if _inherited(traj, i) else ""]
    lines = [f"=== turn {i}: " + ", ".join(f for f in facts if f)]
    lines += ["--- reply", *_indented(_reply(turn, chat, decode), max_lines)]
    for call in (turn.reply.get("tool_calls") or []) if chat else []:
        fn = call.get("function") or {}
        lines.append(f"{INDENT}tool call: {fn.get('name', '?')}({fn.get('arguments', '')})")
    if turn.action:
        lines += [f"--- action ({_ran(turn)})", *_indented(turn.action, max_lines)]
    else:
        lines.append("--- no action parsed from the reply")
    if turn.observation:
        cut = (f"; the agent saw it cut by {turn.observation_truncated_chars} chars"
               if turn.observation_truncated_chars else "")
        lines += [f"--- observation ({_count_lines(turn.observation)}{cut})",
                  *_indented(turn.observation, max_lines)]
    return lines


def _reply(turn: Turn, chat: bool, decode) -> str:
    if chat:
        return turn.reply.get("content") or ""
    if decode is None:
        return (f"[{len(turn.completion_ids)} token ids; no tokenizer found in the run: "
                "--tokenizer DIR decodes them]")
    return decode(turn.completion_ids)


def _ran(turn: Turn) -> str:
    if turn.action_timed_out:
        return f"timed out after {turn.action_s:.2f} s"
    if turn.exit_code is None:
        return f"{turn.action_s:.2f} s" if turn.action_s else "no command ran"
    return f"exit {turn.exit_code}, {turn.action_s:.2f} s"


def _result(traj: Trajectory, max_lines: int) -> list[str]:
    lines = ["=== result", f"status: {_status(traj)}", f"reward: {_reward(traj)}"]
    lines += _grade(traj.grade, max_lines)
    if traj.model_patch.strip():
        lines += [f"--- patch ({_count_lines(traj.model_patch)})",
                  *_indented(traj.model_patch, max_lines)]
    else:
        lines.append("patch: empty")
    return lines


def _grade(grade: GradeResult | None, max_lines: int) -> list[str]:
    if grade is None:
        return ["grade: none (the episode was not graded)"]
    lines = [f"grade: {grade.status.value} ({grade.cause.value})"
             + (f": {grade.reason}" if grade.reason else "") + f"; {grade.duration_s:.1f} s"]
    for name, split in (("FAIL_TO_PASS", grade.fail_to_pass), ("PASS_TO_PASS", grade.pass_to_pass)):
        passed, failed = split.get("success", []), split.get("failure", [])
        if passed or failed:
            lines.append(f"{INDENT}{name}: {len(passed)} passed, {len(failed)} failed"
                         + (f": {', '.join(failed[:5])}" if failed else "")
                         + (f", ... ({len(failed) - 5} more)" if len(failed) > 5 else ""))
    if grade.dropped_paths:
        lines.append(f"{INDENT}not graded (protected files): {', '.join(grade.dropped_paths)}")
    if grade.flags:
        lines.append(f"{INDENT}flagged for review: {'; '.join(grade.flags)}")
    if grade.log:
        lines += [f"--- test log ({_count_lines(grade.log)})", *_indented(grade.log, max_lines)]
    return lines


def _status(traj: Trajectory) -> str:
    return traj.status.value + (f" ({traj.reason})" if traj.reason else "")


def _reward(traj: Trajectory) -> str:
    return "none (not scored)" if traj.reward is None else f"{traj.reward:g}"


def _inherited(traj: Trajectory, i: int) -> bool:
    return traj.branch_turn is not None and i <= traj.branch_turn


def _indented(text: str, max_lines: int) -> list[str]:
    return [f"{INDENT}{line}".rstrip() for line in clip(text, max_lines)] or [f"{INDENT}(empty)"]


def _count_lines(text: str) -> str:
    n = len(text.splitlines())
    return f"{n} line" + ("" if n == 1 else "s")


def _clip_line(line: str) -> str:
    line = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", line)
    if len(line) <= MAX_LINE_CHARS:
        return line
    return f"{line[:MAX_LINE_CHARS]} [... {len(line) - MAX_LINE_CHARS} chars cut]"
