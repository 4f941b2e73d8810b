"""Scaffolds: how the agent's text becomes actions and how results become observations."""

from __future__ import annotations

from swefleet.agents.config import AgentConfig
from swefleet.agents.protocol import Scaffold
from swefleet.agents.scaffolds.bash import SUBMIT_SENTINEL, BashScaffold
from swefleet.agents.scaffolds.tools import ToolScaffold

__all__ = ["SUBMIT_SENTINEL", "BashScaffold", "ToolScaffold", "make_scaffold"]


def make_scaffold(config: AgentConfig) -> Scaffold:
    """The scaffold named by `config.scaffold`."""
    if config.scaffold == "bash":
        return BashScaffold(config)
    if config.scaffold == "tools":
        return ToolScaffold(config)
    raise ValueError(f"unknown scaffold {config.scaffold!r}")
