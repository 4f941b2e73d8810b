"""A vLLM standby answers torch's cached Triton device check from nvidia-smi, so that importing
torchao (which asks it) does not initialise CUDA in a process vLLM wants to fork from."""

from __future__ import annotations

import os

import pytest
import torch
from swefleet.inference.triton_check import settle_triton_check
from torch._dynamo import device_interface
from torch.utils._triton import has_triton

pytestmark = pytest.mark.unit


@pytest.fixture
def gpu_visible(tmp_path, monkeypatch):
    """A machine that reports a GPU (torch's availability checks) and an `nvidia-smi` that
    answers compute capability 9.0; any CUDA query fails the test."""
    smi = tmp_path / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 9.0\n")
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(device_interface.CudaInterface, "is_available", staticmethod(lambda: True))

    def cuda_query(*args, **kwargs):
        raise AssertionError("CUDA was queried")

    monkeypatch.setattr(torch.cuda, "get_device_properties", cuda_query)
    monkeypatch.setattr(torch.cuda, "current_device", cuda_query)
    has_triton.cache_clear()
    yield smi
    has_triton.cache_clear()


def test_torch_answers_the_check_through_cuda(gpu_visible):
    with pytest.raises(AssertionError, match="CUDA was queried"):
        has_triton()


def test_the_check_is_answered_from_nvidia_smi_and_cached(gpu_visible):
    assert settle_triton_check() == "has_triton=True (compute capability 9.x from nvidia-smi)"
    assert has_triton() is True  # what torchao's import then reads
    assert "cuda" not in device_interface.caching_worker_device_properties
    assert "cuda" not in device_interface.caching_worker_current_devices
    assert not torch.cuda.is_initialized()


def test_without_an_answer_the_check_is_left_to_torch(gpu_visible):
    gpu_visible.write_text("#!/bin/sh\nexit 9\n")
    assert settle_triton_check() == "no nvidia-smi answer"
    with pytest.raises(AssertionError, match="CUDA was queried"):
        has_triton()


def test_nothing_is_done_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    assert settle_triton_check() == "not needed"


def test_the_capability_is_answered_from_nvidia_smi_while_open_then_restored(gpu_visible,
                                                                              monkeypatch):
    from swefleet.inference.triton_check import capability_from_nvidia_smi

    def cuda_query(device=None):
        raise AssertionError("CUDA was queried")

    monkeypatch.setattr(torch.cuda, "get_device_capability", cuda_query)
    with capability_from_nvidia_smi():
        assert torch.cuda.get_device_capability() == (9, 0)  # what torchao's import reads
        assert torch.cuda.get_device_capability(0) == (9, 0)
        with pytest.raises(AssertionError, match="CUDA was queried"):
            torch.cuda.get_device_capability(1)  # another device: torch answers
    assert torch.cuda.get_device_capability is cuda_query
    assert not torch.cuda.is_initialized()


def test_without_an_answer_torch_answers_the_capability(gpu_visible, monkeypatch):
    from swefleet.inference.triton_check import capability_from_nvidia_smi

    gpu_visible.write_text("#!/bin/sh\nexit 9\n")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (8, 6))
    with capability_from_nvidia_smi():
        assert torch.cuda.get_device_capability() == (8, 6)
