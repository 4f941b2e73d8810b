"""The W&B sink in offline mode (wandb runs its own service process: integration tier)."""

import time

import pytest

from swefleet.sinks import SinksConfig, WandbSink

pytestmark = pytest.mark.integration
RECORD = {"step": 0, "rollout/reward_mean": 0.5, "rollout/version_skew": {"0": 6}}


def test_wandb_offline_sink_records_the_metrics(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_SILENT", "true")
    cfg = SinksConfig(wandb_project="swefleet-test", wandb_mode="offline")
    sink = WandbSink(cfg, tmp_path, "t", {"lr": 1e-3})
    sink.write(0, RECORD)
    sink.close()
    runs = list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1
    deadline = time.monotonic() + 30  # wandb's service process finishes writing after finish()
    while b"rollout/reward_mean" not in runs[0].read_bytes():
        assert time.monotonic() < deadline, "the offline W&B run never recorded the metrics"
        time.sleep(0.2)
