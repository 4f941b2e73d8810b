"""The tool-calling scaffold: Qwen3 tool-call parsing, the tool schemas, binary-safe file tools
over a local sandbox, and whole episodes through the loop with the scripted model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from swefleet.agents.chat import ChatML
from swefleet.agents.config import AgentConfig
from swefleet.agents.loop import run_episode
from swefleet.agents.prompts import PROMPTS_DIR
from swefleet.agents.protocol import Action, FormatError
from swefleet.agents.scaffolds import ToolScaffold, make_scaffold
from swefleet.agents.scaffolds.tool_calls import ARGUMENTS, parse_tool_call, tool_schemas
from swefleet.agents.scripted import ScriptedModel

from swefleet.types import EpisodeStatus, Task

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ holds shared helpers
from local_sandbox import LocalShellSandbox

pytestmark = pytest.mark.unit

TASK = Task(instance_id="demo__demo-1", repo="demo/demo", problem_statement="greet() is rude.")
GREET = "def greet():\n    return 'go away, rude'\n"
FILES = {"greet.py": GREET, "dup.py": "x = 1\ny = 2\nx = 1\n", "pkg/empty.py": ""}


def call(name: str, **arguments) -> str:
    body = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"I will use {name}.\n<tool_call>\n{body}\n</tool_call>"


@pytest.fixture
def scaffold() -> ToolScaffold:
    return ToolScaffold(
        AgentConfig(scaffold="tools", command_timeout_s=5, observation_max_chars=300)
    )


@pytest.fixture
def sandbox(tmp_path) -> LocalShellSandbox:
    return LocalShellSandbox.create(tmp_path / "repo", FILES)


# ---------------------------------------------------------------- schemas and prompts


def test_schemas_and_argument_models_agree():
    schemas = {s["function"]["name"]: s for s in tool_schemas()}
    assert list(schemas) == list(ARGUMENTS) == ["bash", "view", "str_replace", "trace", "submit"]
    for name, schema in schemas.items():
        assert schema["type"] == "function" and schema["function"]["description"]
        params = schema["function"]["parameters"]
        model = ARGUMENTS[name]
        assert set(params["properties"]) == set(model.model_fields)
        required = {f for f, info in model.model_fields.items() if info.is_required()}
        assert set(params["required"]) == required


def test_system_prompt_lists_tools_in_qwen3_format(scaffold):
    system = scaffold.system_prompt(TASK)
    lines = [json.dumps(s, ensure_ascii=False) for s in tool_schemas()]
    block = "<tools>\n" + "\n".join(lines) + "\n</tools>"
    assert block in system
    assert system.endswith(
        '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
    )
    assert "5 seconds" in system and "greet() is rude." in scaffold.instance_prompt(TASK)
    assert {p.name for p in (PROMPTS_DIR / "tools").iterdir()} >= {"system.j2", "tools.json"}
    assert isinstance(make_scaffold(AgentConfig(scaffold="tools")), ToolScaffold)


# ---------------------------------------------------------------- parsing


@pytest.mark.parametrize(
    "text, action",
    [
        (call("bash", command="ls -la"), Action(tool="bash", command="ls", arguments={})),
        (call("view", path="a.py"), Action(tool="view", arguments={"path": "a.py"})),
        (
            call("view", path="a.py", view_range=[2, -1]),
            Action(tool="view", arguments={"path": "a.py", "view_range": [2, -1]}),
        ),
        (
            (
                '<think>maybe <tool_call>{"name": "submit"}</tool_call></think>'
                '<tool_call>{"name": "str_replace", "arguments": '
                '{"path": "a", "old_str": "x", "new_str": ""}}</tool_call>'
            ),
            Action(tool="str_replace", arguments={"path": "a", "old_str": "x", "new_str": ""}),
        ),
        ('<tool_call>{"name": "submit"}</tool_call>', Action(tool="submit", submit=True)),
        (call("submit", message="done"), Action(tool="submit", submit=True)),  # none taken
        (  # a U+FFFD the model writes is an ordinary character (undecodable ids: the loop)
            call("str_replace", path="a", old_str="caf\ufffd", new_str="café"),
            Action(
                tool="str_replace",
                arguments={"path": "a", "old_str": "caf\ufffd", "new_str": "café"},
            ),
        ),
    ],
)
def test_parse_valid_tool_calls(text, action):
    parsed = parse_tool_call(text)
    if action.tool == "bash":
        assert parsed == Action(tool="bash", command="ls -la", arguments={"command": "ls -la"})
    else:
        assert parsed == action


@pytest.mark.parametrize(
    "text, message",
    [
        ("I am done.", "no <tool_call> found"),
        ('I would run {"command": "ls"}.', "no <tool_call> found"),
        ('{"name": "bash", "arguments": {"command": "ls"}}\n{"name": "submit", "arguments": {}}',
         "found 2 tool calls"),
        ('<tool_call>\n{"name": "submit", "arguments": {}}\nand then more', "opened but not closed"),
        ('<tool_call>\n{"name": "bash", "argu', "opened but not closed"),
        ('<tool_call>\n{"name": "submit", "arguments": {}}\n[/tool_call] and more',
         "opened but not closed"),
        ('<tool_call>\n{"name": "submit", "arguments": {}}\n[tool_call]', "opened but not closed"),
        (call("bash", command="ls") + call("submit"), "found 2 tool calls"),
        ("<tool_call>{name: bash}</tool_call>", "not valid JSON: Expecting property name"),
        ("<tool_call>[1, 2]</tool_call>", 'string "name"'),
        ('<tool_call>{"name": "bash", "args": {}}</tool_call>', "unexpected keys ['args']"),
        (call("python", code="1"), "unknown tool 'python'"),
        ('<tool_call>{"name": "bash", "arguments": "ls"}</tool_call>', "must be a JSON object"),
        (call("bash"), "bad arguments for bash: command: Field required"),
        (call("bash", command="  "), "command is empty"),
        (call("bash", command=["ls"]), "command: Input should be a valid string"),
        (call("view", path="a", view_range=[1]), "view_range: List should have at least 2"),
        (call("view", path="a", view_range=[1, True]), "view_range.1: Input should be a valid int"),
        (call("str_replace", path="a", old_str="x"), "new_str: Field required"),
        (call("bash", command="ls", now=True), "now: Extra inputs are not permitted"),
    ],
)
def test_malformed_tool_calls_are_format_errors(text, message):
    with pytest.raises(FormatError, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_tool_call(text)


def test_action_describe_records_command_or_call():
    assert parse_tool_call(call("bash", command="ls")).describe() == "ls"
    described = parse_tool_call(call("view", path="a.py")).describe()
    assert json.loads(described) == {"name": "view", "arguments": {"path": "a.py"}}


def test_format_error_text(scaffold):
    text = scaffold.format_error(FormatError("no <tool_call> found"), "length")
    assert text.startswith("Format error: no <tool_call> found") and "token limit" in text
    assert "bash, view, str_replace, trace, submit" in text


# ---------------------------------------------------------------- file tools


async def run_tool(scaffold, sandbox, text: str) -> str:
    observation = await scaffold.execute(parse_tool_call(text), sandbox, 5.0)
    assert observation.text.startswith("<tool_response>\n")
    assert observation.text.endswith("\n</tool_response>")
    return observation.text


async def test_view_numbers_lines_and_ranges(scaffold, sandbox):
    text = await run_tool(scaffold, sandbox, call("view", path="greet.py"))
    assert "greet.py, lines 1-2 of 2:" in text
    assert "     1\tdef greet():\n     2\t    return 'go away, rude'" in text
    text = await run_tool(scaffold, sandbox, call("view", path="dup.py", view_range=[2, -1]))
    assert "lines 2-3 of 3" in text and "     2\ty = 2\n     3\tx = 1" in text
    assert "1\tx = 1" not in text
    text = await run_tool(scaffold, sandbox, call("view", path="pkg/empty.py"))
    assert "pkg/empty.py is empty." in text


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"path": "nope.py"}, "Error: nope.py does not exist"),
        ({"path": "pkg"}, "Error: pkg is a directory"),
        ({"path": "greet.py", "view_range": [3, 4]}, "view_range [3, 4] is invalid"),
        ({"path": "greet.py", "view_range": [2, 1]}, "1 <= start <= end <= 2"),
        ({"path": "blob.bin"}, "blob.bin is a binary file (5 bytes)"),
    ],
)
async def test_view_errors_are_tool_results(scaffold, sandbox, arguments, message):
    (sandbox.root / "blob.bin").write_bytes(b"\x00\x01ab\n")
    text = await run_tool(scaffold, sandbox, call("view", **arguments))
    assert message in text


async def test_a_missing_path_names_the_repository_files_like_it(scaffold, tmp_path):
    sandbox = LocalShellSandbox.create(tmp_path / "r", {
        "inflection/__init__.py": "x = 1\n", "docs/inflection.rst": "", "setup.py": "",
        "pkg/util.py": "", "tests/util.py": "", "lib/utilities.py": ""})
    text = await run_tool(scaffold, sandbox, call("view", path="/testbed/inflection.py"))
    assert ("Error: /testbed/inflection.py does not exist; the repository has "
            "inflection/__init__.py") in text
    text = await run_tool(scaffold, sandbox, call("str_replace", path="src/util.py",
                                                  old_str="a", new_str="b"))
    assert "src/util.py does not exist; the repository has pkg/util.py, tests/util.py" in text
    text = await run_tool(scaffold, sandbox, call("view", path="util"))
    assert "util does not exist; the repository has pkg/util.py, tests/util.py, lib/utilities.py" \
        in text
    text = await run_tool(scaffold, sandbox, call("view", path="zzz.py"))
    assert text.strip().endswith("Error: zzz.py does not exist\n</tool_response>")


async def test_long_view_is_cut_in_the_middle(scaffold, sandbox):
    (sandbox.root / "long.py").write_text("".join(f"line_{i} = {i}\n" for i in range(200)))
    observation = await scaffold.execute(parse_tool_call(call("view", path="long.py")), sandbox, 5)
    assert observation.truncated_chars > 0 and "use view_range" in observation.text
    assert "line_0 = 0" in observation.text and "line_199 = 199" in observation.text


async def test_str_replace_edits_exactly_once(scaffold, sandbox):
    edit = call("str_replace", path="greet.py", old_str="go away, rude", new_str="hello")
    text = await run_tool(scaffold, sandbox, edit)
    assert "Edited greet.py. Lines 1-2 of 2 now read:" in text and "2\t    return 'hello'" in text
    assert (sandbox.root / "greet.py").read_text() == "def greet():\n    return 'hello'\n"


async def test_str_replace_is_binary_safe(scaffold, sandbox):
    raw = b"caf\xe9 = 1\r\nname = 'old'\r\nend = b'\x00\xff'"  # latin-1, CRLF, NUL, no final \n
    (sandbox.root / "legacy.py").write_bytes(raw)
    edit = call("str_replace", path="legacy.py", old_str="'old'", new_str="'n\u00e9w'")
    text = await run_tool(scaffold, sandbox, edit)
    assert "Edited legacy.py" in text
    assert (sandbox.root / "legacy.py").read_bytes() == raw.replace(b"'old'", "'n\u00e9w'".encode())


@pytest.mark.parametrize(
    "arguments, message",
    [
        ({"path": "dup.py", "old_str": "x = 1", "new_str": "x = 3"}, "occurs 2 times"),
        ({"path": "dup.py", "old_str": "z = 1", "new_str": "z = 3"}, "was not found in dup.py"),
        ({"path": "dup.py", "old_str": "", "new_str": "z"}, "old_str is empty"),
        ({"path": "dup.py", "old_str": "y = 2", "new_str": "y = 2"}, "identical"),
        ({"path": "gone.py", "old_str": "a", "new_str": "b"}, "gone.py does not exist"),
    ],
)
async def test_str_replace_errors_leave_file_untouched(scaffold, sandbox, arguments, message):
    text = await run_tool(scaffold, sandbox, call("str_replace", **arguments))
    assert text.startswith("<tool_response>\nError: ") and message in text
    assert (sandbox.root / "dup.py").read_text() == FILES["dup.py"]
    if "occurs" in message:
        assert "starting on lines 1, 3" in text


async def test_overlapping_matches_are_not_unique(scaffold, sandbox):
    (sandbox.root / "aaa.txt").write_text("aaa\n")
    text = await run_tool(
        scaffold, sandbox, call("str_replace", path="aaa.txt", old_str="aa", new_str="b")
    )
    assert "occurs 2 times" in text and (sandbox.root / "aaa.txt").read_text() == "aaa\n"


# ---------------------------------------------------------------- episodes through the loop


async def test_tool_episode_edits_tests_and_submits(tok, sandbox):
    script = [
        call("view", path="greet.py"),
        call("str_replace", path="greet.py", old_str="go away, rude", new_str="hello"),
        call("bash", command="python3 -c 'import greet; print(greet.greet())'; exit 4"),
        call("view", path="missing.py"),
        "Let me think about it.",
        call("submit"),
    ]
    model = ScriptedModel(tok, script, version=3)
    cfg = AgentConfig(scaffold="tools", command_timeout_s=10.0, max_format_errors=2)
    traj = await run_episode(TASK, sandbox, model, tok, cfg, "ep-t", "g")

    assert traj.status == EpisodeStatus.unresolved and traj.reason == "submitted"
    assert "+    return 'hello'" in traj.model_patch
    view, edit, shell, missing, malformed, submit = traj.turns
    assert json.loads(view.action) == {"name": "view", "arguments": {"path": "greet.py"}}
    assert "go away, rude" in view.observation and view.exit_code is None and view.action_s > 0
    assert "return 'hello'" in edit.observation
    assert shell.action.startswith("python3 -c") and shell.exit_code == 4
    assert "<returncode>4</returncode>" in shell.observation and "hello" in shell.observation
    assert "missing.py does not exist" in missing.observation
    assert malformed.action == "" and malformed.observation.startswith("Format error: no <tool")
    assert json.loads(submit.action) == {"name": "submit", "arguments": {}}
    assert submit.observation == "" and submit.action_s == 0
    assert sandbox.commands[0].startswith("python3 -c")  # file tools ran no shell command
    # token-exact: each request is the exact extension; tool results are user turns
    chat, context = ChatML(tok), []
    for turn, prompt in zip(traj.turns, model.prompts, strict=True):
        assert prompt == context + turn.prompt_ids
        context = prompt + turn.completion_ids
    assert traj.turns[1].prompt_ids == chat.observation_delta(view.completion_ids, view.observation)
    assert tok.decode(traj.turns[1].prompt_ids).startswith("\n<|im_start|>user\n<tool_response>\n")


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la"}}\n',  # never closed
        ('Let me list.\n<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la"}}\n'
         "[/tool_call]"),  # closed with a misspelt tag (an SFT'd Qwen2.5-Coder-1.5B)
        '<tool_call>{"name": "bash", "arguments": {"command": "ls -la"}}</tool_call',
        '<tool_call>{"name": "bash", "arguments": {"command": "ls -la"}}<\\/tool_call> ',
        '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la"}}\n</tool_response>',
        '<tool_call>\n{"name": "bash", "arguments": {"command": "ls -la"}}\n[/code]\n',
        '{"name": "bash", "arguments": {"command": "ls -la"}}',  # no tags (small models)
        'List the files first.\n  {"name": "bash", "arguments": {"command": "ls -la"}}\nDone.',
    ],
)
def test_untagged_or_unclosed_single_calls_count(text):
    assert parse_tool_call(text) == Action(tool="bash", command="ls -la",
                                           arguments={"command": "ls -la"})


def test_a_hostile_reply_of_braces_is_refused_quickly():
    with pytest.raises(FormatError, match="no <tool_call> found"):
        parse_tool_call("{\n" * 20000)


def test_a_raw_newline_inside_a_string_is_taken_as_written():
    text = '<tool_call>\n{"name": "bash", "arguments": {"command": "cd src\nls"}}\n</tool_call>'
    assert parse_tool_call(text).command == "cd src\nls"
