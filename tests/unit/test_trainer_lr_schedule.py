"""The learning-rate schedule: warm-up then constant, linear or cosine decay to `lr_min_ratio`,
the default is today's constant `lr`, a resume from a checkpoint continues the schedule, and
schedules that do not fit the run are refused."""

from __future__ import annotations

import math
from itertools import pairwise
from types import SimpleNamespace

import pytest
import torch
from pydantic import ValidationError
from swefleet.trainer.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from swefleet.trainer.config import TrainerConfig, TrainerJob, check_lr_schedule
from swefleet.trainer.lr_schedule import build_lr_scheduler

pytestmark = pytest.mark.unit

LR = 0.1


def _trainer(seed: int) -> tuple[SimpleNamespace, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 4))
    return SimpleNamespace(model=model), torch.optim.AdamW(model.parameters(), lr=LR)


def _train(policy, optimizer, scheduler, steps: range) -> list[float]:
    """Train `steps` (one fixed input per step) as the trainer does; the lr of each step."""
    used = []
    for step in steps:
        torch.manual_seed(100 + step)
        policy.model(torch.randn(4, 16)).square().sum().backward()
        used.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
    return used


def _lrs(total: int, **knobs) -> list[float]:
    """The lr of steps 0..total-1 and the one after the run's end."""
    policy, optimizer = _trainer(0)
    cfg = TrainerConfig(lr=LR, **knobs)
    scheduler = build_lr_scheduler(optimizer, cfg, total, 0)
    return _train(policy, optimizer, scheduler, range(total)) + [scheduler.get_last_lr()[0]]


def test_default_is_the_constant_lr():
    assert _lrs(5) == [LR] * 6  # bit for bit: the factor is exactly 1


def test_warmup_then_constant():
    assert _lrs(6, lr_warmup_steps=4) == pytest.approx(
        [LR / 4, LR / 2, 3 * LR / 4, LR, LR, LR, LR], rel=1e-12)


def test_warmup_then_linear_decay_to_lr_min():
    got = _lrs(6, lr_warmup_steps=2, lr_decay="linear", lr_min_ratio=0.1)
    decay = [0.1 + 0.9 * (1 - k / 4) for k in range(5)]  # steps 2..5, then the end
    assert got == pytest.approx([LR / 2, LR] + [LR * f for f in decay], rel=1e-12)
    assert got[-1] == pytest.approx(0.1 * LR, rel=1e-12)


def test_warmup_then_cosine_decay_to_lr_min():
    got = _lrs(6, lr_warmup_steps=2, lr_decay="cosine", lr_min_ratio=0.1)
    decay = [0.1 + 0.45 * (1 + math.cos(math.pi * k / 4)) for k in range(5)]
    assert got == pytest.approx([LR / 2, LR] + [LR * f for f in decay], rel=1e-12)
    assert got[-1] == pytest.approx(0.1 * LR, rel=1e-12)
    assert all(a > b for a, b in pairwise(got[2:]))  # decreasing from the peak on


def test_decay_without_warmup_starts_at_lr_and_ends_at_zero():
    got = _lrs(4, lr_decay="linear")
    assert got == pytest.approx([LR, 0.75 * LR, 0.5 * LR, 0.25 * LR, 0.0], rel=1e-12, abs=1e-15)


def test_resume_from_a_checkpoint_continues_the_schedule(tmp_path):
    cfg = TrainerConfig(lr=LR, lr_warmup_steps=2, lr_decay="cosine", lr_min_ratio=0.1)
    straight, straight_opt = _trainer(0)
    want = _train(straight, straight_opt, build_lr_scheduler(straight_opt, cfg, 6, 0), range(6))

    # first life: steps 0-2, checkpoint 3 (the next step to train)
    policy, optimizer = _trainer(0)
    _train(policy, optimizer, build_lr_scheduler(optimizer, cfg, 6, 0), range(3))
    save_checkpoint(policy, optimizer, tmp_path, 3, keep=1)

    # second life: a fresh optimizer loads the checkpoint, the schedule is built at its step
    resumed, resumed_opt = _trainer(1)
    _train(resumed, resumed_opt, build_lr_scheduler(resumed_opt, cfg, 6, 0), range(1))
    record = load_checkpoint(resumed, resumed_opt, latest_checkpoint(tmp_path)[1])
    scheduler = build_lr_scheduler(resumed_opt, cfg, 6, record["step"])
    assert _train(resumed, resumed_opt, scheduler, range(3, 6)) == want[3:]
    for a, b in zip(straight.model.parameters(), resumed.model.parameters(), strict=True):
        assert torch.equal(a, b)


def test_the_config_lr_is_the_base_over_a_loaded_state():
    _, optimizer = _trainer(0)
    optimizer.param_groups[0]["lr"] = 7.0  # e.g. a checkpoint's, saved mid-schedule
    build_lr_scheduler(optimizer, TrainerConfig(lr=LR), None, 5)
    assert optimizer.param_groups[0]["lr"] == LR


@pytest.mark.parametrize(("knobs", "field"), [
    ({"lr_warmup_steps": -1}, "lr_warmup_steps"),
    ({"lr_decay": "step"}, "lr_decay"),
    ({"lr_min_ratio": 1.5}, "lr_min_ratio"),
])
def test_bad_values_are_refused(knobs, field):
    with pytest.raises(ValidationError, match=field):
        TrainerConfig(**knobs)


def test_a_schedule_that_does_not_fit_the_job_is_refused(tmp_path):
    paths = {"model": tmp_path, "batches_dir": tmp_path, "weights_dir": tmp_path}
    with pytest.raises(ValidationError, match=r"lr_warmup_steps=5 is longer than the run "
                                              r"\(max_steps=4\)"):
        TrainerJob(**paths, max_steps=4, trainer={"lr_warmup_steps": 5})
    with pytest.raises(ValidationError, match="lr_decay='cosine' decays over the run's steps"):
        TrainerJob(**paths, trainer={"lr_decay": "cosine"})
    TrainerJob(**paths, max_steps=4, trainer={"lr_warmup_steps": 4, "lr_decay": "linear"})
    TrainerJob(**paths, trainer={"lr_warmup_steps": 3})  # unbounded: warm-up, then constant
    with pytest.raises(ValueError, match=r"\(orchestrator.steps=2\)"):
        check_lr_schedule(TrainerConfig(lr_warmup_steps=3), 2, "orchestrator.steps")
