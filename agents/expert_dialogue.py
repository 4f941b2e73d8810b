"""The scripted expert's replies, and the model client that plays them in the real agent loop.

`expert_steps` is the expert's side of the conversation: a generator that yields one `Step`
(a sentence of reasoning and one action) and receives the observation the sandbox gave. It
runs the tests of the bug's area, replays the issue's example when there is one, finds the
function with `grep`, views it, fixes it with one `str_replace` per gold hunk, runs the
example and the tests again and submits. When the plan has a first guess
(`agents.expert_guess`), it tries that edit first, reruns the example, sees it still fail and
then makes the fix. Its sentences come from the plan (`agents.expert`)
and from what the observations show (the test summary, the example's output), never from the
hidden tests. An observation that is not what the plan expects (the function not found, an
edit refused, tests failing after the fix) ends the conversation with `ExpertAbort`.

`render_step` writes a step in the scaffold's action format: a Qwen3 / Hermes tool call
(`tools`) or one ```bash block (`bash`, where `view` is `cat -n | sed -n` and `str_replace` a
short Python script). `ExpertModel` is a `ModelClient` that answers each request with the next
step, tokenized by the real tokenizer (logprob 0), so the trajectory is token-exact.
"""

from __future__ import annotations

import json
import re
from collections.abc import Generator
from dataclasses import dataclass, field, replace
from pathlib import PurePosixPath
from typing import Any

from swefleet.agents.expert import Edit, ExpertPlan, ReasonedError, issue_title, python_heredoc
from swefleet.agents.protocol import ChatTokenizer
from swefleet.agents.scaffolds.bash import SUBMIT_SENTINEL
from swefleet.agents.scaffolds.suspects import parse_suspects
from swefleet.agents.scaffolds.tools import trace_command
from swefleet.envs.synth.repro import SCRIPT_PATH
from swefleet.inference.protocol import Completion

from swefleet.types import Task

ABORT_REASONS = ("grep_missed", "view_failed", "edit_failed", "example_failed_after_fix",
                 "tests_fail_after_fix", "script_exhausted", "tests_not_listed",
                 "first_guess_passed")
"""Why the expert stopped mid-episode (`ExpertAbort.reason`)."""

SUSPECTS_READ = 3
"""The expert reads the trace's suspects in order when the buggy function is among this many
(the ones before it first); further down, it picks the function from the call tree."""
_RETURNCODE = re.compile(r"<returncode>(-?\d+|none)</returncode>")
_COUNT = re.compile(r"(\d+) (passed|failed|errors?)\b")


class ExpertAbort(ReasonedError, RuntimeError):
    """An observation the plan did not expect: the demonstration is dropped; `reason` is one of
    `ABORT_REASONS`."""


@dataclass
class Step:
    """One reply: a sentence of reasoning, then one tool call."""

    thought: str
    tool: str
    """`bash`, `view`, `str_replace`, `trace` or `submit` (the `tools` scaffold's names)."""
    arguments: dict[str, Any] = field(default_factory=dict)


Dialogue = Generator[Step, str, None]


def expert_steps(plan: ExpertPlan, task: Task, trace: bool = False) -> Dialogue:
    """The expert's replies; `send` each observation to get the next one. With `trace` (the
    scaffold has the `trace` tool) the expert finds the function in the call tree of the issue's
    reproduction script, and with `grep` only when the tree does not show it."""
    title = issue_title(task.problem_statement)
    lead = f"The issue: {title}. " if title else ""
    run_tests = "First I run the tests for this part of the code to see where things stand."
    if plan.test_listing:
        obs = yield Step(f"{lead}First I look for the tests of this part of the code.", "bash",
                         {"command": plan.test_listing})
        _check_listed(obs, plan.test_command)
        lead, run_tests = "", (f"The tests of `{PurePosixPath(plan.file).stem}` are there; I "
                               "run them to see where things stand.")
    obs = yield Step(f"{lead}{run_tests}", "bash", {"command": plan.test_command})
    said = _tests_said(obs, fixed=False)
    if plan.reproduction:
        obs = yield Step(f"{said} Let me run the example from the issue.", "bash",
                         {"command": plan.reproduction_run})
        said = _example_said(obs)
    found, ahead = "", None
    if trace and plan.function and plan.reproduction_rerun == f"python3 {SCRIPT_PATH}":
        tests = " ".join(_test_files(plan.test_command))
        against = (" against those tests, to see which functions of the repository it runs and "
                   "which of them the tests run least") if tests else \
            ", to see which functions of the repository it calls"
        obs = yield Step(f"{said} Let me trace the reproduction{against}.", "trace",
                         {"script": SCRIPT_PATH, **({"tests": tests} if tests else {})})
        found, ahead = _traced(obs, plan), _suspects_ahead(obs, plan)
    if not found and ahead is None:
        obs = yield Step(f"{said} {_find_sentence(plan)}", "bash", {"command": plan.grep})
        if not _grep_found(obs, plan):
            raise ExpertAbort("grep_missed", f"`{plan.grep}` did not show {plan.file}")
    where = f"`{plan.function}` is" if plan.function else "The code is"
    if ahead is not None:
        for i, (name, path, line) in enumerate(ahead):
            obs = yield Step(f"{_suspect_lead(ahead, i)} `{name}`, in {path} at line {line}; "
                             "let me read it.", "view", {"path": path, "view_range": [line, line + 24]})
            _check_view(obs, path)
        where = f"{_suspect_lead(ahead, len(ahead))} `{plan.function}`; it is"
    elif found:
        where = f"Of the calls, `{plan.function}` computes what the issue reports; it is"
    read = "let me read it."
    if plan.def_line and plan.view_range[0] > plan.def_line:
        read = f"it is long, so let me read the part from line {plan.view_range[0]}."
    obs = yield Step(f"{where} in {plan.file} at line {plan.def_line or plan.edits[0].line}; "
                     f"{read}", "view", {"path": plan.file, "view_range": list(plan.view_range)})
    _check_view(obs, plan.file)
    viewed = {plan.file}
    for edit in plan.edits:
        if edit.path not in viewed:
            extra = dict(plan.extra_views)[edit.path]
            obs = yield Step(f"The fix also needs a change in {edit.path}; let me read it.",
                             "view", {"path": edit.path, "view_range": list(extra)})
            _check_view(obs, edit.path)
            viewed.add(edit.path)
        if plan.first_guess is not None:
            edit = yield from _first_guess(plan)
        obs = yield Step(f"{edit.why} Let me fix it.", "str_replace",
                         {"path": edit.path, "old_str": edit.old, "new_str": edit.new})
        if not _edited(obs):
            raise ExpertAbort("edit_failed", obs.strip()[-300:])
    if plan.reproduction:
        obs = yield Step("Let me run the example from the issue again.", "bash",
                         {"command": plan.reproduction_rerun})
        if _exit_code(obs) != 0:
            raise ExpertAbort("example_failed_after_fix", obs.strip()[-300:])
        then = "The example now runs as the issue expects. Now the tests again, to check that " \
               "nothing else broke."
    else:
        then = "Now I run the tests again to check the fix."
    obs = yield Step(then, "bash", {"command": plan.test_command})
    if _exit_code(obs) != 0:
        raise ExpertAbort("tests_fail_after_fix", obs.strip()[-300:])
    yield Step(f"{_tests_said(obs, fixed=True)} The fix is done, so I submit.", "submit")


def _first_guess(plan: ExpertPlan) -> Generator[Step, str, Edit]:
    """Try the plan's first guess and rerun the example; it must still fail. Returns the edit
    from the guess to the fix, its reason prefixed by what the rerun showed."""
    guess, correction = plan.first_guess.guess, plan.first_guess.correction
    obs = yield Step(guess.why, "str_replace",
                     {"path": guess.path, "old_str": guess.old, "new_str": guess.new})
    if not _edited(obs):
        raise ExpertAbort("edit_failed", obs.strip()[-300:])
    obs = yield Step("Let me run the example from the issue again.", "bash",
                     {"command": plan.reproduction_rerun})
    if _exit_code(obs) == 0:
        raise ExpertAbort("first_guess_passed", obs.strip()[-300:])
    return replace(correction, why=f"{_still_said(obs)} {correction.why}")


def _still_said(obs: str) -> str:
    """What a failing rerun of the example showed, in one sentence."""
    lines = [line for line in obs.splitlines() if line.strip()]
    error = next((line.strip() for line in reversed(lines)
                  if re.match(r"^\w*(Error|Exception)", line.strip())), "")
    return f"The example still fails: `{error[:120]}`." if error else "The example still fails."


def _find_sentence(plan: ExpertPlan) -> str:
    subject, function = plan.issue_subject, plan.function
    if not function:
        return "Let me find the code it points at."
    if subject == function or not subject:
        return f"The issue is about `{function}`; let me find where it is defined."
    return f"The issue is about `{subject}`; let me find `{function}`, the code behind it."


def _tests_said(obs: str, fixed: bool) -> str:
    """What a test run showed, in one sentence."""
    counts = {kind.rstrip("s"): int(n) for n, kind in _COUNT.findall(obs)}
    code = _exit_code(obs)
    if code == 0 and counts.get("passed"):
        n = counts["passed"]
        if fixed:
            return f"All {n} tests pass."
        return f"All {n} tests pass, so they do not cover the case from the issue."
    if code == 5:
        return "No tests ran here."
    failed = counts.get("failed", 0) + counts.get("error", 0)
    error = next((line[1:].strip() for line in obs.splitlines() if line.startswith("E ")), "")
    said = f"The tests fail ({failed} failing)" if failed else "The test run failed"
    return f"{said}: `{error[:120]}`." if error else f"{said}."


def _example_said(obs: str) -> str:
    lines = [line for line in obs.splitlines() if line.strip()]
    if "Traceback (most recent call last)" in obs:
        error = next((line for line in reversed(lines) if re.match(r"^\w*(Error|Exception)", line)),
                     "an exception")
        return f"The example raises `{error.strip()[:120]}`, as the issue says."
    return "The example prints the wrong results the issue reports."


def _exit_code(obs: str) -> int | None:
    m = _RETURNCODE.search(obs)
    return int(m.group(1)) if m and m.group(1) != "none" else None


def _traced(obs: str, plan: ExpertPlan) -> str:
    """The call-tree line that shows the plan's function, '' when the trace does not."""
    needle = f"{plan.function}  ({plan.file}:"
    return next((line.strip() for line in obs.splitlines() if line.lstrip().startswith(needle)),
                "")


def _test_files(test_command: str) -> list[str]:
    return [w for w in test_command.split() if w.endswith(".py")]


def _suspects_ahead(obs: str, plan: ExpertPlan) -> list[tuple[str, str, int]] | None:
    """The suspects the trace ranked above the plan's function, when it is among the first
    `SUSPECTS_READ`; None when it is not (the expert then finds it another way)."""
    suspects = parse_suspects(obs)
    for i, (name, path, _) in enumerate(suspects[:SUSPECTS_READ]):
        if name == plan.function and path == plan.file:
            return suspects[:i]
    return None


def _suspect_lead(ahead: list, i: int) -> str:
    """How the `i`-th suspect read is introduced (the ones before it looked right)."""
    if i == 0:
        return "The first suspect is"
    return f"`{ahead[i - 1][0]}` is right for this input. The next suspect is"


def _grep_found(obs: str, plan: ExpertPlan) -> bool:
    return _exit_code(obs) == 0 and (plan.file in obs or plan.grep.split()[-1] == plan.file)


def _check_listed(obs: str, test_command: str) -> None:
    """The listing must show every test file the next command runs (else the demonstration
    would run names it never saw)."""
    files = _test_files(test_command)
    missing = [f for f in files if PurePosixPath(f).name not in obs]
    if missing:
        raise ExpertAbort("tests_not_listed", f"the listing did not show {', '.join(missing)}")


def _check_view(obs: str, path: str) -> None:
    content = obs.lstrip().removeprefix("<tool_response>").lstrip()
    if content.startswith("Error:") or _exit_code(obs) not in (None, 0):
        raise ExpertAbort("view_failed", f"{path}: {obs.strip()[-300:]}")


def _edited(obs: str) -> bool:
    return "Edited " in obs or (_exit_code(obs) == 0 and "edited " in obs)


# ------------------------------------------------------------------------ rendering


def render_step(step: Step, scaffold: str) -> str:
    """`step` as a reply in the scaffold's action format."""
    if scaffold == "tools":
        call = json.dumps({"name": step.tool, "arguments": step.arguments}, ensure_ascii=False)
        return f"{step.thought}\n<tool_call>\n{call}\n</tool_call>"
    if scaffold == "bash":
        return f"{step.thought}\n\n```bash\n{_bash_command(step)}\n```"
    raise ValueError(f"no expert replies for scaffold {scaffold!r}")


def _bash_command(step: Step) -> str:
    args = step.arguments
    if step.tool == "bash":
        return args["command"]
    if step.tool == "view":
        first, last = args["view_range"]
        return f"cat -n {_quote(args['path'])} | sed -n '{first},{last}p'"
    if step.tool == "str_replace":
        script = (f"import pathlib\npath = pathlib.Path({args['path']!r})\n"
                  "text = path.read_bytes().decode()\n"
                  f"old = {args['old_str']!r}\nnew = {args['new_str']!r}\n"
                  "assert text.count(old) == 1, f'old text found {text.count(old)} times'\n"
                  "path.write_bytes(text.replace(old, new).encode())\n"
                  "print('edited', path)")
        return python_heredoc(script)
    if step.tool == "trace":
        return trace_command(args["script"], args.get("tests"))
    if step.tool == "submit":
        return f"echo {SUBMIT_SENTINEL}"
    raise ValueError(f"unknown tool {step.tool!r}")


def _quote(path: str) -> str:
    import shlex

    return shlex.quote(path)


# ------------------------------------------------------------------------ the model client


class ExpertModel:
    """A `ModelClient` for one expert episode: each request gets the dialogue's next step,
    rendered for `scaffold`, after the request's last observation was sent to it."""

    def __init__(self, tokenizer: ChatTokenizer, dialogue: Dialogue, scaffold: str) -> None:
        self.tokenizer, self.dialogue, self.scaffold = tokenizer, dialogue, scaffold
        self.started = False
        self.abort: ExpertAbort | None = None
        """Set when the dialogue stopped on an unexpected observation."""
        self.replies: list[str] = []

    async def policy_version(self) -> int:
        return 0

    async def generate(self, prompt_ids: list[int], *, max_tokens: int, episode_id: str = "",
                       min_policy_version: int = 0) -> Completion:
        try:
            if not self.started:
                self.started = True
                step = next(self.dialogue)
            else:
                step = self.dialogue.send(self.last_observation(prompt_ids))
        except ExpertAbort as abort:
            self.abort = abort
            raise
        except StopIteration:
            self.abort = ExpertAbort("script_exhausted", "the episode went on after submit")
            raise self.abort from None
        text = render_step(step, self.scaffold)
        self.replies.append(text)
        ids = [*self.tokenizer.encode(text), self.tokenizer.im_end_id]
        finish = "stop"
        if len(ids) > max_tokens:
            ids, finish = ids[:max_tokens], "length"
        return Completion(completion_ids=ids, logprobs=[0.0] * len(ids), finish_reason=finish,
                          policy_version=0, server="expert")

    def last_observation(self, prompt_ids: list[int]) -> str:
        """The text of the last user message in the prompt (the observation just appended)."""
        starts = [i for i, t in enumerate(prompt_ids) if t == self.tokenizer.im_start_id]
        if len(starts) < 2:
            return ""
        ids = [t for t in prompt_ids[starts[-2] + 1 : starts[-1]]
               if t not in (self.tokenizer.im_end_id, self.tokenizer.im_start_id)]
        text = self.tokenizer.decode(ids)
        return text.removeprefix("user\n").rstrip("\n")
