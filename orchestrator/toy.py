"""A small verifiable environment for learning-sanity checks: "answer with target tokens".

The policy sees a fixed chat prompt and generates `answer_tokens` tokens; the reward is the
fraction of those positions holding a token from a target set (a fixed slice of the vocabulary,
`target_fraction` of it, special tokens excluded). A random-init model scores about
`target_fraction` (chance); a policy that learns scores 1. It runs through exactly the same RL
loop as the SWE environment (fleet, staleness, groups, batches, trainer, weight sync) without
Docker, so the loop's learning behaviour is tested on its own.
"""

from __future__ import annotations

import time

from swefleet.agents.chat import ChatML
from swefleet.inference.protocol import CancelReason, ModelClient, RequestCancelled
from swefleet.orchestrator.config import ToyConfig
from swefleet.orchestrator.rollout import RolloutFn, RolloutHandle, Sink

from swefleet.types import EpisodeStatus, Task, Trajectory, Turn

PROMPT = "Answer with tokens from the target set."


def toy_tasks(cfg: ToyConfig) -> list[Task]:
    return [
        Task(instance_id=f"toy-{i}", repo="swefleet/toy", problem_statement=f"{PROMPT} #{i}")
        for i in range(cfg.n_tasks)
    ]


def target_ids(vocab_size: int, n_special: int, fraction: float) -> range:
    """The first `fraction` of the non-special ids (special tokens come first in the vocab)."""
    return range(n_special, n_special + max(1, int((vocab_size - n_special) * fraction)))


_STATUS = {CancelReason.timeout: EpisodeStatus.model_timeout,
           CancelReason.stale: EpisodeStatus.dropped_stale,
           CancelReason.shutdown: EpisodeStatus.cancelled}


def token_target_rollout(model: ModelClient, tokenizer, cfg: ToyConfig, n_special: int = 3) -> RolloutFn:
    chat = ChatML(tokenizer)
    targets = set(target_ids(tokenizer.vocab_size, n_special, cfg.target_fraction))

    async def rollout(task: Task, handle: RolloutHandle, group_id: str, sink: Sink) -> Trajectory:
        traj = Trajectory(episode_id=handle.episode_id, task_id=task.instance_id,
                          group_id=group_id)
        t0 = time.monotonic()
        try:
            prompt = chat.message("user", task.problem_statement) + chat.generation_prompt()
            c = await model.generate(prompt, max_tokens=cfg.answer_tokens,
                                     episode_id=handle.episode_id)
            traj.turns = [Turn(prompt_ids=prompt, completion_ids=c.completion_ids,
                               logprobs=c.logprobs, policy_version=c.policy_version,
                               finish_reason=c.finish_reason, latency_s=c.latency_s,
                               routed_experts=c.routed_experts)]
            hits = sum(1 for t in c.completion_ids if t in targets)
            traj.reward = hits / cfg.answer_tokens
            traj.status = EpisodeStatus.resolved if traj.reward >= 0.5 else EpisodeStatus.unresolved
        except RequestCancelled as e:
            traj.status, traj.reason = _STATUS.get(e.reason, EpisodeStatus.infra_error), str(e)
        except Exception as e:  # noqa: BLE001 - the episode's fault boundary
            traj.status, traj.reason = EpisodeStatus.infra_error, f"{type(e).__name__}: {e}"
        finally:
            traj.timings["model"] = traj.timings["total"] = time.monotonic() - t0
            sink(traj)
        return traj

    return rollout
