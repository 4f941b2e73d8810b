"""Supervised fine-tuning data: trajectories -> token samples -> packed batch files.

A sample is the same as the RL trainer's (`orchestrator.advantages.trajectory_samples`): an
episode's tokens exactly as the model saw them, `loss_mask` True on the tokens the model wrote
(its replies and their `<|im_end|>`), so the SFT loss is cross-entropy on the assistant tokens
only. Sources:

- swefleet trajectories (`episodes.jsonl` of a run or an eval, or the oracle's): their token ids
  are used as recorded, so they must come from a model with the same tokenizer; only episodes
  with reward >= `min_reward` are kept (rejection sampling: by default the resolved ones);
- mini-swe-agent trajectories (a JSON document with `messages`, JSONL of them, or a directory of
  `*.traj.json`): the chat is
  rendered with the model's chat template (`agents.chat.ChatML`), token-exact as the agent loop
  would have built it.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
from swefleet.agents.chat import ChatML

from swefleet.batch import pack_samples, write_batch
from swefleet.types import Trajectory

_CONTEXT_ROLES = ("system", "user", "tool")


def trajectory_sample(traj: Trajectory) -> list[dict]:
    """The training samples of one episode (several when its context was compacted)."""
    from swefleet.orchestrator.advantages import trajectory_samples

    return trajectory_samples(traj, 1.0)


def _content(message: dict) -> str:
    """A chat message's text (a string, or OpenAI-style parts whose text parts are joined)."""
    content = message.get("content") or ""
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return str(content)


def messages_sample(messages: list[dict], chat: ChatML) -> dict:
    """One sample of a chat: system/user/tool messages rendered as the agent loop renders them,
    the assistant replies (and their `<|im_end|>`) trained on; other roles (mini-swe-agent's
    closing `exit` message) are not part of the chat."""
    tokens: list[int] = []
    mask: list[bool] = []
    for message in messages:
        role, text = message.get("role", ""), _content(message)
        if role == "assistant":
            head = chat.generation_prompt()
            reply = [*chat.tok.encode(text), chat.tok.im_end_id]
            tail = chat.close_turn(reply)
            tokens += head + reply + tail
            mask += [False] * len(head) + [True] * len(reply) + [False] * len(tail)
        elif role in _CONTEXT_ROLES:
            ids = chat.message("user" if role == "tool" else role, text)
            tokens += ids
            mask += [False] * len(ids)
    if not any(mask):
        raise ValueError("the chat has no assistant message to train on")
    return {"tokens": tokens, "loss_mask": mask, "inference_logprobs": [0.0] * len(tokens),
            "advantage": 1.0, "policy_version": 0}


def _records(path: Path) -> list[dict]:
    """The JSON records of a JSON document, a JSON list, JSONL, an eval's output folder (its
    `trajectories/<task>/<attempt>.json` episodes: rejection fine-tuning on a model's own
    verified successes), or a directory of `*.traj.json` documents (`swefleet export
    mini-swe-agent` writes one `.traj.json` per instance)."""
    if path.is_dir() and (path / "trajectories").is_dir():
        return [r for f in sorted((path / "trajectories").glob("*/*.json")) for r in _records(f)]
    if path.is_dir():
        return [r for f in sorted(path.rglob("*.traj.json")) for r in _records(f)]
    text = path.read_text(encoding="utf-8")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return doc if isinstance(doc, list) else [doc]


def load_samples(path: str | Path, chat: ChatML, min_reward: float = 1.0) -> list[dict]:
    """The SFT samples of a trajectories file or folder (`_records`): swefleet episodes
    (`Trajectory`, those with reward >= `min_reward`) or mini-swe-agent trajectories
    (`messages`)."""
    path = Path(path)
    samples: list[dict] = []
    for i, record in enumerate(_records(path)):
        if "messages" in record:
            samples.append(messages_sample(record["messages"], chat))
        elif isinstance(record.get("turns"), int):
            raise ValueError(f"{path}: record {i} is an eval's summary of an episode (no "
                             "tokens): pass the eval's output folder, whose trajectories/ "
                             "hold the episodes")
        elif "turns" in record:
            traj = Trajectory.model_validate(record)
            if traj.reward is not None and traj.reward >= min_reward:
                samples += trajectory_sample(traj)
        else:
            raise ValueError(f"{path}: record {i} is neither a swefleet episode (`turns`) nor a "
                             "mini-swe-agent trajectory (`messages`)")
    if not samples:
        raise ValueError(f"{path}: no trajectory to train on (episodes need reward >= "
                         f"{min_reward})")
    return samples


def check_vocab(samples: list[dict], vocab_size: int) -> None:
    """ValueError when a token id is outside the model's vocabulary (another tokenizer's)."""
    top = max(max(s["tokens"]) for s in samples)
    if top >= vocab_size:
        raise ValueError(f"token id {top} is outside the model's vocabulary of {vocab_size}: "
                         "the trajectories were tokenized for another model")


def step_batches(samples: list[dict], steps: int, batch_size: int, seed: int) -> list[list[dict]]:
    """`steps` batches of `batch_size` samples (0: all of them), drawn epoch by epoch, each
    epoch in a new seeded order."""
    size = len(samples) if batch_size <= 0 else min(batch_size, len(samples))
    rng = random.Random(seed)
    order: list[int] = []
    batches = []
    for _ in range(steps):
        if len(order) < size:
            epoch = list(range(len(samples)))
            rng.shuffle(epoch)
            order += epoch
        batches.append([samples[i] for i in order[:size]])
        order = order[size:]
    return batches


def write_sft_batches(batches: list[list[dict]], batches_dir: Path) -> None:
    """Batch files `step_000000.npz`, ... for the trainer (existing ones are kept: resume)."""
    from swefleet.batch import batch_path

    batches_dir.mkdir(parents=True, exist_ok=True)
    for step, batch in enumerate(batches):
        path = batch_path(batches_dir, step)
        if not path.exists():
            write_batch(path, pack_samples(batch), {"step": step, "kind": "sft"})


def stats(samples: list[dict]) -> dict[str, float]:
    """Sizes of the SFT data: samples, tokens, trained tokens."""
    return {"samples": len(samples),
            "tokens": int(sum(len(s["tokens"]) for s in samples)),
            "trained_tokens": int(sum(np.count_nonzero(s["loss_mask"]) for s in samples))}
