"""The config sections of the stages around RL: `[sft]` (`swefleet sft`, the first stage of
`swefleet demo`) and `[final_eval]` (the last stage of `swefleet demo`). Part of the config tree:
pydantic only, no command module."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SFTConfig(BaseModel):
    """Supervised fine-tuning before RL (`swefleet sft`, the first stage of `swefleet demo`)."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(0, ge=0)
    """Optimizer steps. 0: no SFT stage (`swefleet demo` starts RL from `[model]`)."""
    trajectories: str = ""
    """Trajectories file to train on: `episodes.jsonl` of a run or an eval (swefleet episodes,
    same tokenizer) or mini-swe-agent trajectories (JSON/JSONL with `messages`). Empty: the
    oracle's trajectories of the `[tasks]` (gold patch applied through `[agent]`'s scaffold,
    then submitted), recorded in real sandboxes."""
    min_reward: float = 1.0
    """Episodes of a swefleet trajectories file are kept when their reward is at least this
    (1.0: the resolved ones)."""
    batch_size: int = Field(0, ge=0)
    """Samples per step, drawn epoch by epoch in a seeded order. 0: every sample every step."""
    lr: float = Field(1e-3, gt=0)
    """Learning rate of the SFT steps (the other trainer knobs are `[trainer]`'s)."""
    seed: int = 0
    """Seed of the sample order."""
    oracle_concurrency: int = Field(2, ge=1)
    """Oracle episodes (sandboxes) at a time."""


class FinalEvalConfig(BaseModel):
    """The eval after RL in `swefleet demo`."""

    model_config = ConfigDict(extra="forbid")

    split: str | None = None
    """Tasks of `[tasks]`'s file to evaluate the final checkpoint on (`heldout`); None: no eval."""
    k: int = Field(1, ge=1)
    """Attempts per task."""
