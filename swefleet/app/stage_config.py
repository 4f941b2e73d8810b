"""The config sections of the stages around RL: `[sft]` (`swefleet sft`, the first stage of
`swefleet demo`) and `[final_eval]` (the last stage of `swefleet demo`). Part of the config tree:
pydantic only, no command module."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class SFTConfig(BaseModel):
    """Supervised fine-tuning before RL (`swefleet sft`, the first stage of `swefleet demo`)."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(0, ge=0)
    """Optimizer steps. 0: no SFT stage (`swefleet demo` starts RL from `[model]`)."""
    trajectories: str = ""
    """What to train on instead of recorded demonstrations: `episodes.jsonl` of an RL run, an
    eval's output folder (its `trajectories/`: rejection fine-tuning on a model's own resolved
    episodes), both swefleet episodes of the same tokenizer, or mini-swe-agent trajectories
    (JSON/JSONL with `messages`). Empty: the
    demonstrations of `demonstrations` on the `[tasks]`, recorded in real sandboxes."""
    demonstrations: Literal["oracle", "expert"] = "oracle"
    """What SFT trains on when `trajectories` is empty. `oracle`: the gold patch applied
    through `[agent]`'s scaffold (one `git apply`), then submitted: an answer. `expert`: the
    scripted expert (`agents/expert.py`) works the bug through the scaffold as an engineer
    would (run the tests of the bug's area, replay the issue's example, grep the function,
    view it, one `str_replace` per gold hunk, rerun, submit), a sentence of reasoning before
    each action; only episodes the grader resolves are kept (`expert_demonstrations.json`
    counts the dropped ones and why). Expert demonstrations are made from tasks of split
    `train` only: other splits among the `[tasks]` are refused."""
    min_reward: float = 1.0
    """Episodes of a swefleet trajectories file are kept when their reward is at least this
    (1.0: the resolved ones)."""
    batch_size: int = Field(0, ge=0)
    """Samples per step, drawn epoch by epoch in a seeded order. 0: every sample every step."""
    lr: float = Field(1e-3, gt=0)
    """Learning rate of the SFT steps: the peak of `[trainer]`'s schedule (the other trainer
    knobs, `lr_warmup_steps` and `lr_decay` among them, are `[trainer]`'s)."""
    seed: int = 0
    """Seed of the sample order."""
    oracle_concurrency: int = Field(2, ge=1)
    """Oracle or expert episodes (sandboxes) at a time."""
    first_guess_fraction: float = Field(0.0, ge=0, le=1)
    """Share of the expert's demonstrations (a stable draw per task) that try a wrong edit of
    the buggy line first, rerun the issue's example, see it still fail and then make the fix:
    a demonstration of checking an edit instead of submitting it. Only tasks whose fix changes
    one line and whose issue has a reproduction take one (`agents/expert_guess.py`); 0: every
    demonstration fixes the bug at its first edit."""


class FinalEvalConfig(BaseModel):
    """The held-out evals of `swefleet demo`: after RL, and optionally of the starting model and
    of the SFT checkpoint, on the same tasks and k, so that each pair is a paired comparison
    (McNemar's exact test in `demo_summary.md`)."""

    model_config = ConfigDict(extra="forbid")

    split: str | None = None
    """Tasks of `[tasks]`'s file to evaluate the final checkpoint on (`heldout`), or a
    comma-separated list of splits (`heldout,heldout_instance`: each is reported on its own);
    None: no eval."""
    k: int = Field(1, ge=1)
    """Attempts per task."""
    tasks_per_split: int | None = Field(None, ge=1)
    """At most this many tasks of each split, spread over its packages and the same ones at
    every stage (`swefleet eval --per-split`); None: all of them."""
    base: bool = False
    """Also evaluate the starting model (`[model]`, before SFT) first (`eval-<split>-base/`):
    the baseline the later stages are compared with. Needs a checkpoint (`[model] path` or
    `name`)."""
    after_sft: bool = False
    """Also evaluate the SFT checkpoint before RL starts (`eval-<split>-sft/`), so that RL's own
    gain is measured against SFT alone."""
    temperature: float | None = Field(None, ge=0)
    """Sampling temperature of these evals; None: `[inference] temperature` (what RL samples
    with). A model's published sampling settings (Qwen2.5-Coder-Instruct: 0.7, top-p 0.8) suit
    an eval; RL keeps 1.0 so that its sampling logprobs are the trainer's."""
    top_p: float | None = Field(None, gt=0, le=1)
    """Nucleus sampling mass of these evals; None: `[inference] top_p`."""
