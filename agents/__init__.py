"""The agents room: the multi-turn agent loop, scaffolds (bash blocks, Qwen3 tool calls), the
context budget policy (stop / compact) and token-exact trajectory recording.

Entry point for the orchestrator: `agents.loop.run_episode`. Seams: `agents.protocol`
(Scaffold, ChatTokenizer). No torch, no trainer imports here.
"""

from swefleet.agents.config import AgentConfig
from swefleet.agents.loop import run_episode
from swefleet.agents.protocol import Action, ChatTokenizer, FormatError, Observation, Scaffold
from swefleet.agents.scripted import ScriptedModel, ScriptedReply
from swefleet.agents.tokenizer import Tokenizer

__all__ = [
    "Action",
    "AgentConfig",
    "ChatTokenizer",
    "FormatError",
    "Observation",
    "Scaffold",
    "ScriptedModel",
    "ScriptedReply",
    "Tokenizer",
    "run_episode",
]
