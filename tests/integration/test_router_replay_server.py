"""Router replay through the real pieces: the embedded engine server (tiny Qwen3-MoE preset) on
loopback returns routed experts over HTTP; the fleet client carries them into Turns; the
orchestrator's sample builder and the batch packer turn a two-turn episode into one sample with
`routed_experts` (the same from full and from trimmed turn arrays); the trainer replaying them reproduces the server's log-probs."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import torch
from swefleet.inference.config import InferenceConfig
from swefleet.inference.engine.settings import EngineSettings
from swefleet.inference.fleet import FleetClient
from swefleet.inference.launch import start_embedded_server
from swefleet.orchestrator.advantages import trajectory_samples

from swefleet import routed_experts
from swefleet.batch import pack_samples
from swefleet.tinymodel import PRESETS, create_tiny_model
from swefleet.types import EpisodeStatus, Trajectory, Turn

pytestmark = pytest.mark.integration
SHAPE = PRESETS["tiny-moe"]
L, K = SHAPE["num_hidden_layers"], SHAPE["num_experts_per_tok"]


async def _two_turns(url: str) -> list[Turn]:
    cfg = InferenceConfig(request_timeout_s=120, retry_budget=0)
    turns, context = [], []
    async with FleetClient([url], cfg) as fleet:
        for prompt in ([5, 6, 7, 8, 9, 10], [11, 12, 13]):
            c = await fleet.generate(context + prompt, max_tokens=12, episode_id="e")
            turns.append(
                Turn(
                    prompt_ids=prompt,
                    completion_ids=c.completion_ids,
                    logprobs=c.logprobs,
                    policy_version=c.policy_version,
                    routed_experts=c.routed_experts,
                )
            )
            context += prompt + c.completion_ids
    return turns


def test_routed_experts_over_http_into_a_replayed_batch(tmp_path):
    from swefleet.trainer.forward import batch_logprobs
    from swefleet.trainer.titan import load_policy

    ckpt = create_tiny_model(tmp_path / "tiny-moe", preset="tiny-moe")
    with start_embedded_server(EngineSettings(model_dir=ckpt, threads=1),
                               log_path=tmp_path / "server.log") as server:
        turns = asyncio.run(_two_turns(server.url))
    end = 0
    for turn in turns:
        end += len(turn.prompt_ids) + len(turn.completion_ids)
        ids = routed_experts.decode(turn.routed_experts)
        assert ids.shape == (end - 1, L, K) and ids.dtype == np.uint8

    traj = Trajectory(
        episode_id="e", task_id="t", turns=turns, status=EpisodeStatus.resolved, reward=1.0
    )
    (sample,) = trajectory_samples(traj, 1.0)
    covered = len(turns[0].prompt_ids) + len(turns[0].completion_ids) - 1
    stored = routed_experts.trim(turns[1].routed_experts, end, covered)  # as the agent loop does
    trimmed = traj.model_copy(deep=True)
    trimmed.turns[1].routed_experts, trimmed.turns[1].routed_experts_start = stored, covered
    assert len(routed_experts.decode(stored)) == end - 1 - covered
    (same,) = trajectory_samples(trimmed, 1.0)
    assert np.array_equal(same["routed_experts"], sample["routed_experts"])
    arrays = pack_samples([sample])
    assert arrays["routed_experts"].shape == (end, L, K)
    policy = load_policy(ckpt, torch.device("cpu"), "sdpa")
    mask = arrays["loss_mask"]
    replayed = batch_logprobs(policy, arrays)[mask]
    assert np.abs(replayed - arrays["inference_logprobs"][mask]).max() < 1e-4
    forced = {**arrays, "routed_experts": (arrays["routed_experts"] + 1) % SHAPE["num_experts"]}
    assert np.abs(batch_logprobs(policy, forced)[mask] - replayed).max() > 1e-5  # replay is used
