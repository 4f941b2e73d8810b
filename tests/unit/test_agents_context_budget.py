"""The agent's context budget fitted to the servers' window (`max_model_len`)."""

from __future__ import annotations

import pytest
from swefleet.agents.config import AgentConfig, fit_context_budget

pytestmark = pytest.mark.unit


def test_budget_is_lowered_to_the_window_only_when_larger(caplog):
    agent = AgentConfig(context_budget_tokens=131072, max_tokens_per_turn=4096)
    with caplog.at_level("WARNING"):
        fitted = fit_context_budget(agent, 8448)
    assert fitted.context_budget_tokens == 8448 and fitted.max_tokens_per_turn == 4096
    assert "lowered to the servers' max_model_len 8448" in caplog.text
    assert fit_context_budget(agent, 200000) is agent
    assert fit_context_budget(agent, None) is agent


def test_a_turn_that_cannot_fit_the_window_is_a_clear_error():
    agent = AgentConfig(context_budget_tokens=131072, max_tokens_per_turn=8192)
    with pytest.raises(ValueError, match="max_tokens_per_turn=8192 does not fit .* max_model_len=4096"):
        fit_context_budget(agent, 4096)
