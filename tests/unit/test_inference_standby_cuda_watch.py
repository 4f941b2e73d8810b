"""A standby names the import that first initialised CUDA: torch's lazy init is watched during
the preload and restored after (on this CPU-only machine the init itself fails, which is what
the watch must see past)."""

from __future__ import annotations

import traceback

import pytest
import torch
from swefleet.inference.standby import CudaInitWatch, outside_frames

pytestmark = pytest.mark.unit


def _module_level_cuda_query():
    """Stands for a module that asks CUDA at import time."""
    try:
        torch.cuda._lazy_init()
    except (RuntimeError, AssertionError, torch.cuda.CudaError):
        pass  # no GPU here: the call is what is watched


def test_the_first_cuda_init_is_traced_to_its_caller_and_torch_is_restored():
    original = torch.cuda._lazy_init
    with CudaInitWatch() as watch:
        _module_level_cuda_query()
        first = list(watch.where)
        _module_level_cuda_query()  # a second init does not replace the first
    assert torch.cuda._lazy_init is original
    assert watch.where == first and len(first) <= 3
    assert first[-1].startswith(__file__ + ":")
    assert "/torch/" not in "".join(first)


def test_outside_frames_drops_torch_and_importlib_frames():
    stack = [traceback.FrameSummary("/x/vllm/a.py", 3, "f"),
             traceback.FrameSummary("<frozen importlib._bootstrap>", 9, "g"),
             traceback.FrameSummary("/y/site-packages/torch/cuda/__init__.py", 7, "h")]
    assert outside_frames(stack) == ["/x/vllm/a.py:3"]
    assert outside_frames(stack * 4, keep=2) == ["/x/vllm/a.py:3", "/x/vllm/a.py:3"]


def test_the_import_after_which_cuda_was_initialised_is_named(monkeypatch):
    from swefleet.inference import standby

    state = {"on": False}

    def import_module(name):
        if name == "initialises":
            state["on"] = True

    monkeypatch.setattr(standby.importlib, "import_module", import_module)
    monkeypatch.setattr(standby, "_cuda_initialised", lambda: state["on"])
    assert standby._import_all(["json", "initialises", "later"]) == ([], "initialises")
    assert standby._import_all(["later"], first_cuda="the_entry") == ([], "the_entry")
