"""Groups -> advantages -> training samples. Pure functions, no I/O.

Rewards: a graded episode scores 1.0 when resolved, 0.0 otherwise. Episodes whose status says
nothing about the policy's answer (infra errors, cancellations, stale drops) and episodes cut off by
a limit the policy did not choose (token budget, wall clock, model timeout) are masked: they are
excluded from the group baseline and contribute no loss. A group's baseline is the mean reward of
its scored episodes (GRPO without std normalisation, as in Dr. GRPO).
"""

from __future__ import annotations

import logging

from swefleet import routed_experts
from swefleet.types import EpisodeStatus, Trajectory

log = logging.getLogger(__name__)

#: Cut off by something other than the policy's own answer: masked, never scored as 0.
MASKED = frozenset(
    {
        EpisodeStatus.infra_error,
        EpisodeStatus.cancelled,
        EpisodeStatus.dropped_stale,
        EpisodeStatus.limit_tokens,
        EpisodeStatus.limit_time,
        EpisodeStatus.model_timeout,
    }
)


def is_scored(traj: Trajectory) -> bool:
    return traj.status not in MASKED and traj.reward is not None and bool(traj.own_turns)


def group_advantages(group: list[Trajectory]) -> dict[str, float]:
    """Advantage per scored episode id: reward minus the mean reward of the group's scored ones."""
    scored = [t for t in group if is_scored(t)]
    if not scored:
        return {}
    baseline = sum(t.reward for t in scored) / len(scored)
    return {t.episode_id: t.reward - baseline for t in scored}


def is_zero_variance(group: list[Trajectory]) -> bool:
    rewards = {t.reward for t in group if is_scored(t)}
    return len(rewards) <= 1


def trajectory_samples(traj: Trajectory, advantage: float) -> list[dict]:
    """Token-exact samples of one episode (a turn flagged `new_sample` starts a new one). A
    sample whose every turn has routed experts gets `routed_experts` [tokens, layers, top_k]
    (turns store full or trimmed arrays: `Turn.routed_experts_start`). A branch's shared prefix
    (turns 0..`branch_turn`) is context only: masked out of the loss, its versions not counted."""
    samples: list[dict] = []
    current: dict | None = None
    routing: list[list[tuple[int, int, str | None]]] = []
    first_own = len(traj.turns) - len(traj.own_turns)
    for i, turn in enumerate(traj.turns):
        own = i >= first_own
        if current is None or turn.new_sample:
            current = {
                "tokens": [], "loss_mask": [], "inference_logprobs": [],
                "advantage": advantage, "policy_version": turn.policy_version,
                "episode_id": traj.episode_id,
            }
            samples.append(current)
            routing.append([])
        n_out = len(turn.completion_ids)
        current["tokens"] += turn.prompt_ids + turn.completion_ids
        current["loss_mask"] += [False] * len(turn.prompt_ids) + [own] * n_out
        current["inference_logprobs"] += [0.0] * len(turn.prompt_ids) + (
            list(turn.logprobs) if own else [0.0] * n_out)
        if own and i == first_own:
            current["policy_version"] = turn.policy_version  # the prefix's version is not its own
        elif own:
            current["policy_version"] = min(current["policy_version"], turn.policy_version)
        end = len(current["tokens"])
        routing[-1].append((end, turn.routed_experts_start, turn.routed_experts))
    for sample, turns in zip(samples, routing):
        if all(text is not None for _, _, text in turns):
            decoded = [(end, start, routed_experts.decode(text)) for end, start, text in turns]
            sample["routed_experts"] = routed_experts.sample_routing(decoded, len(sample["tokens"]))
    return [s for s in samples if any(s["loss_mask"])]


def batch_samples(groups: list[list[Trajectory]], drop_zero_variance: bool) -> list[dict]:
    """All training samples of the given groups."""
    samples: list[dict] = []
    for group in groups:
        if drop_zero_variance and is_zero_variance(group):
            continue
        advantages = group_advantages(group)
        for traj in group:
            if traj.episode_id in advantages:
                samples += trajectory_samples(traj, advantages[traj.episode_id])
    routed = sum("routed_experts" in s for s in samples)
    if 0 < routed < len(samples):  # router replay needs every sample's routing
        log.warning("routed experts missing in %d of %d samples: batch trained without router "
                    "replay", len(samples) - routed, len(samples))
        for s in samples:
            s.pop("routed_experts", None)
    return samples
