"""Checkpoints staged into pinned host buffers allocated after the first step (`warm`): the
warm-up writes nothing, later saves reuse the buffers, and each checkpoint holds the state of
its own save. The CPU twin (no pinning): tests/unit/test_trainer_checkpoint_async.py."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from swefleet.trainer.checkpoint import complete_checkpoints, latest_checkpoint, load_checkpoint
from swefleet.trainer.checkpoint_async import AsyncCheckpointer

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU"),
]


def _trainer(seed: int):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.Linear(256, 8)).cuda()
    return SimpleNamespace(model=model), torch.optim.AdamW(model.parameters(), lr=0.1)


def _step(policy, optimizer) -> None:
    policy.model(torch.randn(4, 256, device="cuda")).square().sum().backward()
    optimizer.step()
    optimizer.zero_grad()


def test_warm_pins_once_and_saves_reuse_the_buffers(tmp_path):
    policy, optimizer = _trainer(0)
    saver = AsyncCheckpointer(tmp_path, keep=2, pinned=True)
    _step(policy, optimizer)
    saver.warm(policy, optimizer)
    assert saver.warm_s is not None and complete_checkpoints(tmp_path) == []
    cache = saver.stager.state_dict_cache
    for step in (2, 3):
        _step(policy, optimizer)
        saved = [p.detach().cpu().clone() for p in policy.model.parameters()]
        saver.save(policy, optimizer, step)
        _step(policy, optimizer)  # mutates the live state while the write runs
        saver.wait()
        assert saver.stager.state_dict_cache is cache  # the warm buffers, reused
    saver.close()
    _, path = latest_checkpoint(tmp_path)
    restored, restored_opt = _trainer(1)
    _step(restored, restored_opt)
    load_checkpoint(restored, restored_opt, path)
    got = [p.detach().cpu() for p in restored.model.parameters()]
    assert all(torch.equal(a, b) for a, b in zip(saved, got, strict=True))


def test_buffers_pinned_before_the_first_step_serve_every_save(tmp_path):
    """A fresh trainer pins before its first batch (`Saves.warm_early`: fused AdamW's state
    primed, `trainer/optim_state.py`); training stays bit-identical to an unprimed twin and the
    first save reuses those buffers."""
    from swefleet.trainer.optim_state import prime_adam_state

    (policy, optimizer), (twin, twin_opt) = _trainer(0), _trainer(0)
    optimizer = torch.optim.AdamW(policy.model.parameters(), lr=0.1, fused=True)
    twin_opt = torch.optim.AdamW(twin.model.parameters(), lr=0.1, fused=True)
    saver = AsyncCheckpointer(tmp_path, keep=2, pinned=True)
    assert prime_adam_state(optimizer)
    saver.warm(policy, optimizer)
    cache = saver.stager.state_dict_cache
    for _ in range(3):
        torch.manual_seed(5)
        _step(policy, optimizer)
        torch.manual_seed(5)
        _step(twin, twin_opt)
    for a, b in zip(policy.model.parameters(), twin.model.parameters(), strict=True):
        assert torch.equal(a, b)
    saver.save(policy, optimizer, 3)
    saver.wait()
    assert saver.stager.state_dict_cache is cache
    saver.close()
