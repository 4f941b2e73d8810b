"""Trainer checkpoints off the step path: the state is copied when `save` returns (a later
optimizer step does not leak into it), the newest `keep` complete checkpoints stay, and the
save's blocking and background times are reported."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from swefleet.trainer.checkpoint import complete_checkpoints, latest_checkpoint, load_checkpoint
from swefleet.trainer.checkpoint_async import AsyncCheckpointer

pytestmark = pytest.mark.unit


def _trainer(seed: int) -> tuple[SimpleNamespace, torch.optim.Optimizer]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 8))
    return SimpleNamespace(model=model), torch.optim.AdamW(model.parameters(), lr=0.1)


def _step(policy, optimizer) -> None:
    policy.model(torch.randn(4, 64)).square().sum().backward()
    optimizer.step()
    optimizer.zero_grad()


def _snapshot(policy, optimizer) -> list[torch.Tensor]:
    moments = [s["exp_avg"] for s in optimizer.state.values()]
    return [t.detach().clone() for t in [*policy.model.parameters(), *moments]]


def test_async_save_then_resume_gets_the_state_of_the_save(tmp_path):
    policy, optimizer = _trainer(0)
    _step(policy, optimizer)
    saved = _snapshot(policy, optimizer)
    saver = AsyncCheckpointer(tmp_path, keep=1)
    saver.save(policy, optimizer, 1, meta={"note": "x"})
    _step(policy, optimizer)  # the next step mutates the live tensors while the write runs
    saver.wait()
    metrics = saver.metrics()
    saver.close()
    assert metrics["checkpoint_blocking_s"] > 0 and metrics["checkpoint_background_s"] > 0

    step, path = latest_checkpoint(tmp_path)
    restored, restored_opt = _trainer(1)
    _step(restored, restored_opt)  # (same optimizer state layout)
    record = load_checkpoint(restored, restored_opt, path)
    assert (step, record["step"], record["note"]) == (1, 1, "x")
    got = _snapshot(restored, restored_opt)
    assert all(torch.equal(a, b) for a, b in zip(saved, got, strict=True))
    assert not torch.equal(got[0], policy.model[0].weight)  # the later step is not in it


@pytest.mark.parametrize("keep", [1, 2])
def test_retention_keeps_the_newest_complete_checkpoints(tmp_path, keep):
    policy, optimizer = _trainer(0)
    saver = AsyncCheckpointer(tmp_path, keep=keep)
    for step in (1, 2, 3):
        _step(policy, optimizer)
        saver.save(policy, optimizer, step)
    saver.close()
    assert [s for s, _ in complete_checkpoints(tmp_path)] == [1, 2, 3][-keep:]
    assert sorted(p.name for p in tmp_path.iterdir()) == [f"step_00000{s}" for s in
                                                          [1, 2, 3][-keep:]]


def test_inline_save_is_the_same_checkpoint(tmp_path):
    policy, optimizer = _trainer(0)
    _step(policy, optimizer)
    saver = AsyncCheckpointer(tmp_path, keep=1, background=False)
    saver.save(policy, optimizer, 4)
    saver.close()
    assert latest_checkpoint(tmp_path)[0] == 4
