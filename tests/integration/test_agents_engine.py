"""agents.loop.run_episode against the real embedded engine (tiny random-init Qwen3) on loopback,
through FleetClient, with a local shell sandbox.

A spy on the fleet client's HTTP pools records every /v1/completions exchange (the prompt ids
sent, and the `prompt_token_ids`, `token_ids` and logprobs the server answered). Each episode's
exchanges must equal its Turn records token for token: the concatenation of a sample's recorded
ids up to a turn is exactly the prompt the server saw, and the turn's completion ids / logprobs
are exactly what it produced. The random model's garbage must end as format-error observations,
never a crash.
"""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from swefleet.agents.chat import ChatML
from swefleet.agents.config import AgentConfig
from swefleet.agents.context import compacted_instance
from swefleet.agents.loop import run_episode
from swefleet.agents.scaffolds import make_scaffold
from swefleet.agents.tokenizer import Tokenizer
from swefleet.inference.config import InferenceConfig
from swefleet.inference.engine.settings import EngineSettings
from swefleet.inference.fleet import FleetClient
from swefleet.inference.launch import start_embedded_server
from swefleet.inference.testing import tiny_checkpoint

from swefleet.types import EpisodeStatus, Task, Trajectory

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/ holds shared helpers
from local_sandbox import LocalShellSandbox

pytestmark = pytest.mark.integration

FILES = {"greet.py": "def greet():\n    return 'go away, rude'\n"}
MAX_TOKENS = 24
#: ids that also end a completion (besides <|im_end|>): some replies then end with `stop` on a
#: token that is not <|im_end|>, others are cut by `length`; both must be closed exactly once.
STOP_IDS = list(range(300, 340))


def task(n: int) -> Task:
    return Task(instance_id=f"demo__demo-{n}", repo="demo/demo", problem_statement=f"bug #{n}")


@dataclass
class Exchange:
    """One /v1/completions request and the server's answer, as seen on the wire."""

    sent_prompt: list[int]
    max_tokens: int
    server_prompt: list[int]
    server_ids: list[int]
    server_logprobs: list[float]
    finish_reason: str


class WireSpy:
    """Records every completion exchange of a FleetClient, keyed by the asyncio task's name
    (each episode runs in a task named after its episode id)."""

    def __init__(self, fleet: FleetClient) -> None:
        self.exchanges: dict[str, list[Exchange]] = {}
        for pool in fleet._pools:  # test-only spy on the client's HTTP connection pools
            pool.post = self._spy(pool.post)

    def _spy(self, post):
        async def spy(url, **kwargs):
            resp = await post(url, **kwargs)
            if url.endswith("/v1/completions") and resp.status_code == 200:
                choice = resp.json()["choices"][0]
                exchange = Exchange(
                    sent_prompt=kwargs["json"]["prompt"],
                    max_tokens=kwargs["json"]["max_tokens"],
                    server_prompt=choice["prompt_token_ids"],
                    server_ids=choice["token_ids"],
                    server_logprobs=choice["logprobs"]["token_logprobs"],
                    finish_reason=choice["finish_reason"],
                )
                name = asyncio.current_task().get_name()
                self.exchanges.setdefault(name, []).append(exchange)
            return resp

        return spy


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_checkpoint(tmp_path_factory.getbasetemp() / "inference-models")


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    log = tmp_path_factory.mktemp("agents-engine") / "server.log"
    settings = EngineSettings(model_dir=model_dir, threads=1, max_batch_size=8)
    with start_embedded_server(settings, log_path=log) as handle:
        yield handle


@pytest.fixture(scope="module")
def tok(model_dir) -> Tokenizer:
    return Tokenizer.from_dir(model_dir)


async def play(server, tok, tmp_path, configs: list[AgentConfig]):
    """Run one episode per config concurrently; returns the trajectories and the spy."""
    inference = InferenceConfig(request_timeout_s=120, stop_token_ids=STOP_IDS, retry_budget=0)
    async with FleetClient([server.url], inference) as fleet:
        spy = WireSpy(fleet)
        runs = []
        for i, cfg in enumerate(configs):
            sandbox = LocalShellSandbox.create(tmp_path / f"repo-{i}", FILES)
            episode = run_episode(task(i), sandbox, fleet, tok, cfg, f"ep-{i}", "g")
            runs.append(asyncio.create_task(episode, name=f"ep-{i}"))
        trajs = await asyncio.gather(*runs)
    return trajs, spy


def assert_wire_exact(traj: Trajectory, exchanges: list[Exchange], chat: ChatML) -> None:
    """Every turn: the sample's recorded ids so far == what was sent == what the server saw;
    the completion ids / logprobs == what the server produced."""
    assert len(exchanges) == len(traj.turns) > 0
    context: list[int] = []
    for i, (turn, wire) in enumerate(zip(traj.turns, exchanges, strict=True)):
        if turn.new_sample:
            context = []
        elif i > 0:  # the previous turn is closed exactly once, then the observation follows
            closer = chat.close_turn(traj.turns[i - 1].completion_ids)
            assert turn.prompt_ids[: len(closer)] == closer
        prompt = context + turn.prompt_ids
        assert wire.sent_prompt == prompt
        assert wire.server_prompt == prompt
        assert wire.server_ids == turn.completion_ids
        assert wire.server_logprobs == turn.logprobs
        assert len(turn.logprobs) == len(turn.completion_ids) <= wire.max_tokens <= MAX_TOKENS
        assert wire.finish_reason == turn.finish_reason in {"stop", "length"}
        context = prompt + turn.completion_ids


@pytest.mark.timeout(180)
async def test_garbage_episodes_are_token_exact_on_the_wire(server, tok, tmp_path):
    steps = 4
    base = {"max_tokens_per_turn": MAX_TOKENS, "max_steps": steps, "max_format_errors": steps}
    configs = [AgentConfig(scaffold=s, **base) for s in ("bash", "tools", "bash", "tools")]
    trajs, spy = await play(server, tok, tmp_path, configs)

    chat = ChatML(tok)
    for traj, cfg in zip(trajs, configs, strict=True):
        assert_wire_exact(traj, spy.exchanges[traj.episode_id], chat)
        # a random model writes no valid action: every turn is a format error, then it ends
        assert traj.status == EpisodeStatus.format_errors, traj.reason
        assert len(traj.turns) == steps
        for turn in traj.turns:
            assert turn.action == "" and turn.observation.startswith("Format error: ")
            assert turn.exit_code is None and turn.action_s == 0.0
        marker = "<tool_call>" if cfg.scaffold == "tools" else "```bash"
        assert marker in traj.turns[0].observation
        assert traj.model_patch == "" and traj.timings["model"] > 0
    ends = {t.completion_ids[-1] for traj in trajs for t in traj.turns}
    assert ends - {tok.im_end_id}, "no completion ended on a non-<|im_end|> token"


@pytest.mark.timeout(180)
async def test_compaction_on_the_engine_keeps_each_sample_exact(server, tok, tmp_path):
    chat = ChatML(tok)
    scaffold = make_scaffold(AgentConfig(scaffold="tools"))
    system, instance = scaffold.system_prompt(task(0)), scaffold.instance_prompt(task(0))
    cfg = AgentConfig(
        scaffold="tools",
        max_tokens_per_turn=MAX_TOKENS,
        context_budget_tokens=len(chat.initial_prompt(system, instance)) + 700,
        on_context_full="compact",
        compact_keep_steps=2,
        compact_observation_chars=200,
        max_steps=9,
        max_format_errors=9,
    )
    (traj,), spy = await play(server, tok, tmp_path, [cfg])

    assert_wire_exact(traj, spy.exchanges[traj.episode_id], chat)
    breaks = [i for i, turn in enumerate(traj.turns) if turn.new_sample]
    assert breaks and 0 not in breaks, [len(t.prompt_ids) for t in traj.turns]
    for i in breaks:  # a fresh rendering from the records alone: system + instance + summary
        summary = compacted_instance(instance, traj.turns[:i], 2, 200)
        assert traj.turns[i].prompt_ids == chat.initial_prompt(system, summary)
    print(
        traj.reason, [(len(t.prompt_ids), len(t.completion_ids), t.new_sample) for t in traj.turns]
    )
    assert traj.status == EpisodeStatus.format_errors and len(traj.turns) == 9
