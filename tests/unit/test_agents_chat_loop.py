"""agents.chat_loop.run_chat_episode against the real scripted chat server (loopback) and a local
shell sandbox: the bash scaffold with plain messages, the tools scaffold with native tool calls,
and a typed ending for every bad behaviour of the endpoint (never a crash)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from swefleet.agents.chat_loop import run_chat_episode
from swefleet.agents.chat_record import ChatTrajectory
from swefleet.agents.config import AgentConfig
from swefleet.agents.export import read_trajectory, write_trajectory
from swefleet.agents.scaffolds import SUBMIT_SENTINEL
from swefleet.inference.chat_client import ChatClient
from swefleet.inference.config import InferenceConfig

from swefleet.types import EpisodeStatus, Task

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ holds shared helpers
from chat_server import chat_server, requests_seen
from local_sandbox import LocalShellSandbox

pytestmark = pytest.mark.unit

TASK = Task(instance_id="demo__demo-1", repo="demo/demo", problem_statement="greet() is rude.")
FILES = {"greet.py": "def greet():\n    return 'go away'\n"}
FIX = "sed -i 's/go away/hello/' greet.py"


def bash(command: str) -> dict:
    return {"content": f"Fixing it.\n```bash\n{command}\n```"}


def tool(name: str, arguments: dict | str) -> dict:
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"tool_call": {"name": name, "arguments": raw}}


async def play(tmp_path, script, scaffold="bash", **agent) -> tuple[ChatTrajectory, list]:
    sandbox = LocalShellSandbox.create(tmp_path / "repo", FILES)
    cfg = AgentConfig(**{"command_timeout_s": 10.0, "scaffold": scaffold, **agent})
    inference = InferenceConfig(retry_backoff_s=0.01, request_timeout_s=1.0, connect_timeout_s=1.0)
    with chat_server(script) as url:
        async with ChatClient(url, "scripted", inference) as model:
            traj = await run_chat_episode(TASK, sandbox, model, None, cfg, "ep-0", "g-0")
        return traj, requests_seen(url)


async def test_bash_scaffold_fixes_and_submits_with_plain_messages(tmp_path):
    traj, requests = await play(tmp_path, [bash(FIX), bash(f"echo {SUBMIT_SENTINEL}")])
    assert traj.status == EpisodeStatus.unresolved and traj.reason == "submitted"
    assert "+    return 'hello'" in traj.model_patch
    first, second = (r["body"] for r in requests)
    assert [m["role"] for m in first["messages"]] == ["system", "user"] and "tools" not in first
    assert [m["role"] for m in second["messages"]] == ["system", "user", "assistant", "user"]
    assert "<returncode>0</returncode>" in second["messages"][-1]["content"]
    turn = traj.turns[0]
    assert turn.action == FIX and turn.exit_code == 0 and turn.messages == first["messages"]
    assert turn.prompt_ids == turn.completion_ids == turn.logprobs == []
    assert traj.n_tokens == traj.turns[-1].prompt_tokens + traj.turns[-1].completion_tokens > 0
    assert traj.api == "chat" and traj.model == "scripted" and traj.endpoint.startswith("http")


async def test_tools_scaffold_uses_native_tool_calls(tmp_path):
    script = [tool("bash", {"command": FIX}), tool("view", {"path": "greet.py"}),
              tool("submit", {})]
    traj, requests = await play(tmp_path, script, scaffold="tools")
    assert traj.status == EpisodeStatus.unresolved and "hello" in traj.model_patch
    body = requests[2]["body"]
    assert [t["function"]["name"] for t in body["tools"]] == ["bash", "view", "str_replace", "trace",
                                                             "submit"]
    assert "<tools>" not in body["messages"][0]["content"]  # the endpoint renders the tools
    answer = body["messages"][-1]
    assert answer["role"] == "tool" and answer["tool_call_id"] == "call_4"
    assert "return 'hello'" in answer["content"] and "<tool_response>" not in answer["content"]
    assert traj.turns[0].action == FIX and json.loads(traj.turns[1].action)["name"] == "view"


async def test_trajectory_file_keeps_messages_and_reads_as_a_trajectory(tmp_path):
    traj, _ = await play(tmp_path, [bash(f"echo {SUBMIT_SENTINEL}")])
    path = write_trajectory(traj, tmp_path / "t.json")
    data = json.loads(path.read_text())
    assert data["api"] == "chat" and data["turns"][0]["reply"]["content"].startswith("Fixing")
    assert read_trajectory(path).turns[0].action == f"echo {SUBMIT_SENTINEL}"


@pytest.mark.parametrize(
    "script,status,reason",
    [
        ([tool("bash", '{"command": "ls"')], EpisodeStatus.format_errors, "not valid JSON"),
        ([tool("rm_rf", {})], EpisodeStatus.format_errors, "unknown tool"),
        ([{"content": "no call"}], EpisodeStatus.format_errors, "makes no tool call"),
        ([{"empty": True}], EpisodeStatus.format_errors, "makes no tool call"),
        ([{"status": 429, "retry_after": 0}], EpisodeStatus.infra_error, "overload"),
        ([{"status": 500}], EpisodeStatus.infra_error, "server_error"),
        ([{"truncated": True}], EpisodeStatus.infra_error, "not JSON"),
        ([{"content": "late", "delay_s": 1.5}], EpisodeStatus.model_timeout, "timeout"),
    ],
)
async def test_bad_endpoint_behaviour_ends_typed(tmp_path, script, status, reason):
    traj, _ = await play(tmp_path, script, scaffold="tools")
    assert traj.status == status and reason in traj.reason, traj.reason
    assert traj.reward is None and traj.model_patch == ""


async def test_malformed_arguments_get_a_tool_message_and_the_episode_goes_on(tmp_path):
    script = [tool("bash", "{oops"), tool("submit", {})]
    traj, requests = await play(tmp_path, script, scaffold="tools")
    assert traj.status == EpisodeStatus.unresolved
    answer = requests[1]["body"]["messages"][-1]
    assert answer["role"] == "tool" and "Format error" in answer["content"]
    assert traj.turns[0].action == "" and "not valid JSON" in traj.turns[0].observation


async def test_empty_bash_replies_end_with_format_errors(tmp_path):
    traj, requests = await play(tmp_path, [{"empty": True}], max_format_errors=2)
    assert traj.status == EpisodeStatus.format_errors and len(requests) == 2
    assert requests[1]["body"]["messages"][-1]["role"] == "user"


async def test_the_budget_ends_the_episode_on_the_endpoint_counts(tmp_path):
    traj, requests = await play(tmp_path, [bash("ls")], context_budget_tokens=300,
                                max_tokens_per_turn=10)
    assert traj.status == EpisodeStatus.limit_tokens and len(requests) >= 1
    assert all(r["body"]["max_tokens"] <= 10 for r in requests)
