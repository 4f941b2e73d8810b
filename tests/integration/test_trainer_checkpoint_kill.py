"""A trainer killed (SIGKILL) while a checkpoint is being written in the background leaves the
previous checkpoint complete and loadable, and only a `.tmp-` leftover of the cut one."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from types import SimpleNamespace

import pytest
import torch
from swefleet.trainer.checkpoint import clean_partial, latest_checkpoint, load_checkpoint

pytestmark = pytest.mark.integration

CHILD = textwrap.dedent("""
    import os, signal, sys, time
    from types import SimpleNamespace
    import torch
    from swefleet.trainer.checkpoint_async import AsyncCheckpointer

    torch.manual_seed(0)
    model = torch.nn.Linear(1024, 4096)  # 4M parameters: a write of ~50 MB, not instant
    opt = torch.optim.AdamW(model.parameters())
    policy = SimpleNamespace(model=model)
    model(torch.randn(2, 1024)).sum().backward(); opt.step()
    saver = AsyncCheckpointer(sys.argv[1], keep=1)
    saver.save(policy, opt, 1)
    saver.wait()
    torch.save(model.state_dict(), sys.argv[2])
    model(torch.randn(2, 1024)).sum().backward(); opt.step()
    saver.save(policy, opt, 2)
    shard = os.path.join(sys.argv[1], "step_000002.tmp-save", "__0_0.distcp")
    while not os.path.exists(shard):  # the worker thread has started writing checkpoint 2
        time.sleep(0.001)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_kill_mid_save_leaves_the_previous_checkpoint_usable(tmp_path):
    ckpts, expected = tmp_path / "ckpts", tmp_path / "expected.pt"
    proc = subprocess.run([sys.executable, "-c", CHILD, str(ckpts), str(expected)],
                          check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]
    assert latest_checkpoint(ckpts)[0] == 1
    left = sorted(p.name for p in ckpts.iterdir())
    assert [p.name for p in clean_partial(ckpts)] == ["step_000002.tmp-save"], left

    model = torch.nn.Linear(1024, 4096)
    opt = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 1024)).sum().backward()
    opt.step()
    assert load_checkpoint(SimpleNamespace(model=model), opt, ckpts / "step_000001")["step"] == 1
    want = torch.load(expected)
    assert all(torch.equal(v, model.state_dict()[k]) for k, v in want.items())
