"""The learning-rate schedule: linear warm-up, then a constant, linear or cosine learning rate
(`TrainerConfig.lr_warmup_steps`, `lr_decay`, `lr_min_ratio`).

A torch `LambdaLR` over the trainer's optimizer, stepped once per trainer step (also one whose
update a non-finite gradient skipped). Its position is the number of steps the job has trained
(`step - start_version`), which a checkpoint records (its step) as does a published version: a
resumed trainer builds the scheduler at that position, so the schedule goes on where it was (no
second warm-up), also after a resume from published weights without a checkpoint. The base
learning rate is always the config's `lr`, also over an optimizer state loaded from a checkpoint.
"""

from __future__ import annotations

import functools
import math

import torch
from swefleet.trainer.config import TrainerConfig


def lr_factor(step: int, *, warmup: int, decay: str, min_ratio: float,
              total: int | None) -> float:
    """The multiplier of `lr` at the 0-based step `step` of a run of `total` steps: (step + 1) /
    warmup during warm-up, then 1 (`constant`), or from 1 down to `min_ratio` at step `total`
    (`linear`, `cosine`; `min_ratio` after it)."""
    if step < warmup:
        return (step + 1) / warmup
    if decay == "constant":
        return 1.0
    progress = 1.0 if step >= total else (step - warmup) / (total - warmup)
    shape = 1.0 - progress if decay == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
    return min_ratio + (1.0 - min_ratio) * shape


def build_lr_scheduler(
    optimizer: torch.optim.Optimizer, cfg: TrainerConfig, total_steps: int | None,
    done_steps: int,
) -> torch.optim.lr_scheduler.LambdaLR:
    """The schedule of `cfg` over `optimizer` for a run of `total_steps` steps (None: unbounded,
    only for `constant`), of which `done_steps` are trained: the optimizer's learning rate is
    now that of step `done_steps`. Call its `step()` after each trainer step."""
    from torch.optim.lr_scheduler import LambdaLR

    for group in optimizer.param_groups:
        group["initial_lr"] = cfg.lr  # the base of LambdaLR (also over a loaded state's lr)
    factor = functools.partial(lr_factor, warmup=cfg.lr_warmup_steps, decay=cfg.lr_decay,
                               min_ratio=cfg.lr_min_ratio, total=total_steps)
    return LambdaLR(optimizer, factor, last_epoch=done_steps - 1)
