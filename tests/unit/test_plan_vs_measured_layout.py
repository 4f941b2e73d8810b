"""The layout `benchmarks/plan_vs_measured.py` predicts from: the preset's shape, the measured
device's memory, the workload of the command line, each AC mode; it validates and plans."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from benchmarks.plan_vs_measured import DEFAULT_LAYOUT, layout_data, predict


def _args(device: str, **over) -> argparse.Namespace:
    base = {"layout": DEFAULT_LAYOUT, "preset": "qwen3-0.6b", "seq_len": 8192, "batch": 4,
            "device": device}
    return argparse.Namespace(**{**base, **over})


def test_gpu_layout_takes_the_device_facts_and_the_workload():
    facts = {"device_name": "NVIDIA H200", "total_mem_gib": 139.5, "peak_tflops": 989.0}
    data = layout_data(_args("cuda"), "full", facts)
    assert data["gpu"] == {"name": "NVIDIA H200", "memory_gib": 139.5, "bf16_tflops": 989.0}
    assert data["trainer"]["micro_batch_tokens"] == 4 * 8192
    assert data["trainer"]["activation_checkpointing"] == "full"
    w = data["workload"]
    assert (w["prompt_tokens"], w["completion_tokens"], w["weight_sync_bytes"]) == (1024, 7168, 2)
    p = predict(data)
    # Qwen3-0.6B shape, vocab 32,768 untied: 2 x V h + 28 x (attention + SwiGLU)
    layer = 1024 * 128 * (2 * 16 + 2 * 8) + 3 * 1024 * 3072
    assert p["params"]["total"] == 2 * 32768 * 1024 + 28 * layer
    free = 0.35 * 139.5 * 2**30 - p["params"]["total"] * 2
    assert p["inference"]["kv_capacity_tokens_per_server"] == pytest.approx(
        free / (28 * 2 * 8 * 128 * 2))


def test_the_default_layout_file_plans_as_it_is():
    from swefleet.app.plan.estimate import plan
    from swefleet.app.plan.layout import load_layout

    p = plan(load_layout(DEFAULT_LAYOUT))
    assert p["gpus"] == {"inference": 1, "trainer": 1, "idle": 0, "total": 1}
    assert p["trainer"]["mem_fits"]


def test_cpu_layout_is_nominal_fp32():
    data = layout_data(_args("cpu", preset="tiny", seq_len=64, batch=2), "none", {})
    assert data["gpu"]["name"] == "cpu (nominal)"
    assert data["inference"]["kv_bytes"] == 4 and data["workload"]["weight_sync_bytes"] == 4
    assert predict(data)["trainer"]["tokens_per_step"] == 128
