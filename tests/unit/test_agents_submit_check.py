"""The check at submit (`check_reproduction_at_submit`): the first submit of an episode whose
issue's reproduction still fails is refused once, with the run shown; a passing script, a second
submit or an issue without a reproduction submit at once. Real loop, real tokenizer, real shell."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from swefleet.agents.config import AgentConfig
from swefleet.agents.loop import run_episode
from swefleet.agents.scaffolds import SUBMIT_SENTINEL
from swefleet.agents.scripted import ScriptedModel
from swefleet.agents.submit_check import CHECK_PATH
from swefleet.envs.synth.repro import with_reproduction

from swefleet.types import EpisodeStatus, Task

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ holds shared helpers
from local_sandbox import LocalShellSandbox

pytestmark = pytest.mark.unit

SCRIPT = ("import sys\nsys.path.insert(0, '')  # the package is not installed here\n"
          "from greet import greet\nassert greet() == 'hello', greet()\nprint('ok')\n")
ISSUE = with_reproduction("greet() is rude.\n\nPlease fix it.", SCRIPT)
TASK = Task(instance_id="demo__demo-1", repo="demo/demo", problem_statement=ISSUE)
FILES = {"greet.py": "def greet():\n    return 'go away'\n"}
SUBMIT = f"```bash\necho {SUBMIT_SENTINEL}\n```"
FIX = "```bash\nsed -i s/'go away'/'hello'/ greet.py\n```"


def tool(name: str, **arguments) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


class HostTmpSandbox(LocalShellSandbox):
    """A local sandbox whose absolute paths (the saved scripts) live in its own folder on the
    host, in writes and in the commands that name them."""

    def mapped(self, path: str) -> Path:
        return self.root.parent / "abs" / path.lstrip("/")

    async def write_file(self, path: str, data: bytes) -> None:
        if path.startswith("/"):
            self.mapped(path).parent.mkdir(parents=True, exist_ok=True)
            self.mapped(path).write_bytes(data)
            return
        await super().write_file(path, data)

    async def run(self, command: str, timeout_s: float | None = None):
        for path in ("/tmp/repro.py", CHECK_PATH):
            command = command.replace(path, str(self.mapped(path)))
        return await super().run(command, timeout_s)


@pytest.fixture
def sandbox(tmp_path) -> HostTmpSandbox:
    return HostTmpSandbox.create(tmp_path / "repo", FILES)


async def play(tok, sandbox, replies, task=TASK, **config):
    model = ScriptedModel(tok, replies, version=3)
    cfg = AgentConfig(command_timeout_s=10.0, check_reproduction_at_submit=True, **config)
    return await run_episode(task, sandbox, model, tok, cfg, "ep-0", "g-0"), model


async def test_a_submit_whose_reproduction_fails_is_refused_once_with_the_run_shown(tok, sandbox):
    traj, model = await play(tok, sandbox, [SUBMIT, FIX, SUBMIT])
    assert (traj.status, traj.reason, traj.refused_submits) == (
        EpisodeStatus.unresolved, "submitted", 1)
    assert len(traj.turns) == 3
    refusal = traj.turns[0].observation
    assert refusal.startswith("Not submitted yet: the reproduction script from the issue still "
                              "fails")
    assert "AssertionError: go away" in refusal and "<returncode>1</returncode>" in refusal
    assert f"run `echo {SUBMIT_SENTINEL}` again" in refusal
    assert "'hello'" in traj.model_patch
    prompts = [tok.decode(r.prompt_ids) for r in model.requests]
    assert "AssertionError: go away" in prompts[1]  # the model saw the run


async def test_the_second_submit_is_accepted_whatever_the_script_says(tok, sandbox):
    traj, _ = await play(tok, sandbox, [SUBMIT, SUBMIT])
    assert (traj.status, traj.reason, traj.refused_submits, len(traj.turns)) == (
        EpisodeStatus.unresolved, "submitted", 1, 2)
    assert traj.model_patch == ""


async def test_a_fixed_bug_or_an_issue_without_a_script_submits_at_once(tok, sandbox, tmp_path):
    traj, _ = await play(tok, sandbox, [FIX, SUBMIT])
    assert (traj.reason, traj.refused_submits, len(traj.turns)) == ("submitted", 0, 2)
    plain = TASK.model_copy(update={"problem_statement": "greet() is rude."})
    other = HostTmpSandbox.create(tmp_path / "other", FILES)
    traj, _ = await play(tok, other, [SUBMIT], task=plain)
    assert (traj.reason, traj.refused_submits, len(traj.turns)) == ("submitted", 0, 1)
    assert other.commands == [f"echo {SUBMIT_SENTINEL}"]  # nothing else ran


async def test_off_by_default(tok, sandbox):
    model = ScriptedModel(tok, [SUBMIT], version=3)
    traj = await run_episode(TASK, sandbox, model, tok, AgentConfig(command_timeout_s=10.0),
                             "ep-0", "g-0")
    assert (traj.reason, traj.refused_submits, sandbox.commands) == (
        "submitted", 0, [f"echo {SUBMIT_SENTINEL}"])


async def test_the_issue_s_own_script_is_checked_not_the_agent_s_copy(tok, sandbox):
    emptied = "```bash\necho 'print(1)' > /tmp/repro.py && python3 /tmp/repro.py\n```"
    traj, _ = await play(tok, sandbox, [emptied, SUBMIT, SUBMIT])
    assert "<returncode>0</returncode>" in traj.turns[0].observation  # the agent's copy passes
    assert traj.refused_submits == 1
    assert sandbox.mapped(CHECK_PATH).read_text() == SCRIPT


async def test_the_tools_scaffold_refuses_in_a_tool_response(tok, sandbox):
    traj, _ = await play(tok, sandbox, [tool("submit"), tool("submit")], scaffold="tools")
    refusal = traj.turns[0].observation
    assert refusal.startswith("<tool_response>\nNot submitted yet")
    assert "call `submit` again" in refusal and traj.refused_submits == 1
    assert json.loads(traj.turns[0].action) == {"name": "submit", "arguments": {}}


def test_refused_submits_are_counted_in_step_metrics_and_eval_reports():
    from swefleet.evals.report import build_report, report_markdown
    from swefleet.orchestrator.metrics import rollout_metrics

    from swefleet.types import Trajectory

    def traj(status: EpisodeStatus, refused: int) -> Trajectory:
        return Trajectory(episode_id="e", task_id="t", status=status, reward=0.0,
                          refused_submits=refused)

    trajs = [traj(EpisodeStatus.resolved, 1), traj(EpisodeStatus.unresolved, 1),
             traj(EpisodeStatus.resolved, 0)]
    m = rollout_metrics(trajs, trained_version=0)
    assert (m["rollout/refused_submits"], m["rollout/resolved_after_refused_submit"]) == (2, 1)
    records = [{"task_id": "t", "resolved": True, "refused_submits": 1},
               {"task_id": "t", "resolved": False, "refused_submits": 1},
               {"task_id": "u", "resolved": None, "refused_submits": 1},  # infra: not resolved
               {"task_id": "u", "resolved": True}]  # a record from before the check
    report = build_report(records, k=2)
    assert (report["refused_submits"], report["resolved_after_refused_submit"]) == (3, 1)
    assert "3 episodes, 1 of them resolved in the end" in report_markdown(report)
    quiet = build_report(records[-1:], k=1)
    assert quiet["refused_submits"] == 0 and "refused" not in report_markdown(quiet)
