"""`swefleet export mini-swe-agent` of an eval run through a chat endpoint: real chat episodes
(the scripted chat server on loopback, a local shell sandbox) kept as an eval keeps them, then
exported without any tokenizer: prompts and replies are the messages the episode recorded."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from swefleet.agents.chat_loop import run_chat_episode
from swefleet.agents.config import AgentConfig
from swefleet.agents.export import write_trajectory
from swefleet.agents.scaffolds import SUBMIT_SENTINEL
from swefleet.evals.export import export_mini_swe_agent, trajectory_path
from swefleet.inference.chat_client import ChatClient
from swefleet.inference.config import InferenceConfig

from swefleet.types import Task

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ holds shared helpers
from chat_server import chat_server
from local_sandbox import LocalShellSandbox

pytestmark = pytest.mark.unit

TASK = Task(instance_id="demo__demo-1", repo="demo/demo", problem_statement="greet() is rude.",
            image="swefleet-demo:none")
FILES = {"greet.py": "def greet():\n    return 'go away'\n"}
FIX = "sed -i 's/go away/hello/' greet.py"
SCRIPTS = {
    "bash": [{"content": f"Fixing it.\n```bash\n{FIX}\n```"}, {"content": "no block"},
             {"content": f"```bash\necho {SUBMIT_SENTINEL}\n```"}],
    "tools": [{"tool_call": {"name": "bash", "arguments": json.dumps({"command": FIX})}},
              {"tool_call": {"name": "submit", "arguments": "{}"}}],
}


async def chat_eval_dir(tmp_path: Path, scaffold: str) -> tuple[Path, object]:
    """An eval output dir holding one chat episode (attempt 0), as `swefleet eval --api chat`
    leaves it."""
    agent = AgentConfig(scaffold=scaffold, command_timeout_s=10.0)
    inference = InferenceConfig(retry_backoff_s=0.01, request_timeout_s=5.0)
    sandbox = LocalShellSandbox.create(tmp_path / "repo", FILES)
    with chat_server(SCRIPTS[scaffold], served="chat-policy") as url:
        async with ChatClient(url, "chat-policy", inference) as model:
            traj = await run_chat_episode(TASK, sandbox, model, None, agent, "ep-0")
    out = tmp_path / "out"
    write_trajectory(traj, trajectory_path(out, TASK.instance_id, 0))
    (tmp_path / "tasks.jsonl").write_text(TASK.model_dump_json() + "\n")
    (out / "eval_run.json").write_text(json.dumps({
        "run_id": "r", "model_name_or_path": "chat-policy", "agent": "model",
        "model": "chat-policy", "api": "chat", "tasks": str(tmp_path / "tasks.jsonl"),
        "split": None, "k": 1, "instance_ids": [TASK.instance_id]}))
    (out / "config.json").write_text(json.dumps({"agent": agent.model_dump(mode="json")}))
    (out / "episodes.jsonl").write_text(json.dumps({"task_id": TASK.instance_id,
                                                    "attempt": 0}) + "\n")
    return out, traj


def exported(out: Path) -> dict:
    dest = export_mini_swe_agent(out)  # no tokenizer: "chat-policy" is a name, not a dir
    return json.loads((dest / TASK.instance_id / f"{TASK.instance_id}.traj.json").read_text())


async def test_bash_chat_episode_exports_its_messages(tmp_path):
    out, traj = await chat_eval_dir(tmp_path, "bash")
    doc = exported(out)
    roles = [m["role"] for m in doc["messages"]]
    assert roles == ["system", "user", *["assistant", "user"] * 3, "exit"]
    system, user, a1, o1, a2, o2, a3, _, end = doc["messages"]
    sent = traj.turns[0].messages
    assert (system["content"], user["content"]) == (sent[0]["content"], sent[1]["content"])
    assert a1["content"] == SCRIPTS["bash"][0]["content"]
    assert a1["extra"]["actions"] == [{"command": FIX}] and o1["extra"]["returncode"] == 0
    assert a2["content"] == "no block" and o2["extra"]["interrupt_type"] == "FormatError"
    assert a3["extra"]["actions"] == [{"command": f"echo {SUBMIT_SENTINEL}"}]
    assert end["extra"]["exit_status"] == "Submitted" and "hello" in end["extra"]["submission"]
    config = doc["info"]["config"]
    assert config["agent_type"] == "swefleet.agents.chat_loop.run_chat_episode"
    assert config["model"]["model_name"] == "chat-policy"
    assert doc["info"]["model_stats"]["api_calls"] == 3


async def test_native_tool_calls_export_in_extra(tmp_path):
    out, traj = await chat_eval_dir(tmp_path, "tools")
    doc = exported(out)
    assert doc["messages"][0]["content"] == traj.turns[0].messages[0]["content"]  # chat prompt
    reply, observation = doc["messages"][2:4]
    (call,) = reply["extra"]["tool_calls"]
    assert call["function"]["name"] == "bash" and reply["extra"]["actions"] == [{"command": FIX}]
    assert observation["role"] == "user" and observation["extra"]["returncode"] == 0
    assert [m["role"] for m in doc["messages"]][-1] == "exit"
