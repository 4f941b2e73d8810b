"""A vLLM standby imports everything `vllm serve` needs and leaves CUDA uninitialised, so the
server it becomes can fork its engine core (`engine_start_method = "fork"`). On a machine with
a GPU and vLLM; the log line names the import that initialised CUDA when one did."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
import torch
from swefleet.inference.standby import VLLM_STANDBY

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
    pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="needs vLLM"),
]


def test_a_vllm_standby_imports_everything_without_initialising_cuda():
    argv = [sys.executable, "-m", "swefleet.inference.standby", "--entry", VLLM_STANDBY.entry,
            "--preload", ",".join(VLLM_STANDBY.preload), "--fork-safe"]
    done = subprocess.run(argv, input=b"", capture_output=True, timeout=300,  # released unused
                          check=False)
    log = done.stderr.decode(errors="replace")
    assert done.returncode == 0, log[-3000:]
    assert f"{len(VLLM_STANDBY.preload)}/{len(VLLM_STANDBY.preload)} modules imported" in log, log
    assert "CUDA initialised: False" in log, log[-3000:]
