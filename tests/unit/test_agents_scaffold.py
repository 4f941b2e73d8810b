"""agents.scaffolds.bash, agents.prompts and agents.config: parsing, observations, templates."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from swefleet.agents.config import AgentConfig
from swefleet.agents.prompts import PROMPTS_DIR, truncate_middle
from swefleet.agents.protocol import Action, FormatError
from swefleet.agents.scaffolds import SUBMIT_SENTINEL, BashScaffold, make_scaffold
from swefleet.envs.protocol import CommandResult

from swefleet.types import Task

pytestmark = pytest.mark.unit

TASK = Task(instance_id="demo__demo-1", repo="demo/demo", problem_statement="greet() is rude.")


@pytest.fixture
def scaffold() -> BashScaffold:
    return BashScaffold(AgentConfig(observation_max_chars=200, command_timeout_s=7.5))


def test_prompts_are_template_files_and_render_task(scaffold):
    assert {p.name for p in (PROMPTS_DIR / "bash").glob("*.j2")} == {
        "system.j2",
        "instance.j2",
        "observation.j2",
        "format_error.j2",
    }
    system = scaffold.system_prompt(TASK)
    assert f"echo {SUBMIT_SENTINEL}" in system and "7.5 seconds" in system
    instance = scaffold.instance_prompt(TASK)
    assert "greet() is rude." in instance and "/testbed" in instance and "demo/demo" in instance


@pytest.mark.parametrize(
    "text, command",
    [
        ("I will look.\n```bash\nls -la\n```", "ls -la"),
        ("```bash\ncat <<'EOF' > a.py\nx = 1\nEOF\n```\n", "cat <<'EOF' > a.py\nx = 1\nEOF"),
        ("<think>maybe ```bash\nrm -rf /\n```</think>\n```bash\npwd\n```", "pwd"),
        ("```bash\ngrep -n 'caf\ufffd' menu.py\n```", "grep -n 'caf\ufffd' menu.py"),  # kept
    ],
)
def test_parse_one_block(scaffold, text, command):
    assert scaffold.parse_action(text, "stop") == Action(command=command)


@pytest.mark.parametrize(
    "text, message",
    [
        ("I am done.", "no ```bash block"),
        ("```bash\nls\n```\n```bash\npwd\n```", "found 2"),
        ("```bash\n   \n```", "empty"),
        ("<think>```bash\nls\n```", "no ```bash block"),
        ("```python\nprint(1)\n```", "no ```bash block"),
    ],
)
def test_malformed_replies_raise_format_error(scaffold, text, message):
    with pytest.raises(FormatError, match=message):
        scaffold.parse_action(text, "stop")


def test_format_error_text_mentions_length_cut(scaffold):
    cut = scaffold.format_error(FormatError("no ```bash block found"), "length")
    plain = scaffold.format_error(FormatError("no ```bash block found"), "stop")
    assert "no ```bash block found" in plain and "token limit" not in plain
    assert "token limit" in cut and SUBMIT_SENTINEL in cut


def test_observation_truncates_head_and_tail(scaffold):
    output = "HEAD" + "x" * 1000 + "TAIL"
    obs = scaffold.observe(Action(command="cat big"), CommandResult(output=output, exit_code=0))
    assert obs.truncated_chars == len(output) - 200
    assert "HEAD" in obs.text and "TAIL" in obs.text
    assert f"[... {len(output) - 200} characters elided ...]" in obs.text
    assert "<returncode>0</returncode>" in obs.text and not obs.submitted


def test_observation_of_timeout(scaffold):
    result = CommandResult(output="partial", exit_code=None, timed_out=True)
    obs = scaffold.observe(Action(command="sleep 99"), result)
    assert "timed out" in obs.text and "<returncode>none</returncode>" in obs.text
    assert obs.truncated_chars == 0


@pytest.mark.parametrize(
    "output, exit_code, submitted",
    [
        (f"{SUBMIT_SENTINEL}\n", 0, True),
        (f"\n  {SUBMIT_SENTINEL}\ndiff --git a b\n", 0, True),
        (f"{SUBMIT_SENTINEL}\n", 1, False),
        (f"hello\n{SUBMIT_SENTINEL}\n", 0, False),
        (f"{SUBMIT_SENTINEL}X\n", 0, False),
        ("", 0, False),
    ],
)
def test_submission_convention(scaffold, output, exit_code, submitted):
    result = CommandResult(output=output, exit_code=exit_code)
    assert scaffold.observe(Action(command="echo"), result).submitted is submitted


def test_truncate_middle_keeps_short_text():
    assert truncate_middle("abc", 10) == ("abc", 0)
    text, cut = truncate_middle("a" * 50 + "b" * 50, 20)
    assert cut == 80 and text.startswith("a" * 10) and text.endswith("b" * 10)


def test_config_is_strict_and_consistent():
    assert make_scaffold(AgentConfig()).__class__ is BashScaffold
    with pytest.raises(ValidationError):
        AgentConfig(max_step=3)  # typo: extra fields are forbidden
    with pytest.raises(ValidationError):
        AgentConfig(max_tokens_per_turn=4096, context_budget_tokens=4096)
    with pytest.raises(ValidationError):
        AgentConfig(scaffold="toolcall")
    for name, field in AgentConfig.model_fields.items():
        assert field.description, f"AgentConfig.{name} has no docstring"
