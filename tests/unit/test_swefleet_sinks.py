import pytest

from swefleet.sinks import MetricSinks, SinksConfig, TensorBoardSink, scalars

pytestmark = pytest.mark.unit

RECORD = {"step": 3, "rollout/reward_mean": 0.5, "drops/stale": 2, "cost/currency": "USD",
          "rollout/version_skew": {"0": 6, "1": 2}, "bad": float("nan"), "ok": True,
          "ids": [1, 2]}


def test_scalars_flattens_dicts_and_drops_non_numbers():
    assert scalars(RECORD) == {"rollout/reward_mean": 0.5, "drops/stale": 2.0, "ok": 1.0,
                               "rollout/version_skew/0": 6.0, "rollout/version_skew/1": 2.0}


def test_tensorboard_sink_writes_readable_events(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    sink = TensorBoardSink(tmp_path)
    for step in range(3):
        sink.write(step, {**RECORD, "rollout/reward_mean": step / 10})
    sink.close()
    events = EventAccumulator(str(tmp_path))
    events.Reload()
    got = [(e.step, round(e.value, 6)) for e in events.Scalars("rollout/reward_mean")]
    assert got == [(0, 0.0), (1, 0.1), (2, 0.2)]
    assert [e.value for e in events.Scalars("rollout/version_skew/1")] == [2.0] * 3


def test_a_failing_sink_is_switched_off_not_fatal():
    class Broken:
        def write(self, step, record):
            raise OSError("disk full")

        def close(self):
            pass

    class Counting:
        n = 0

        def write(self, step, record):
            self.n += 1

        def close(self):
            pass

    good = Counting()
    sinks = MetricSinks([Broken(), good])
    sinks.write(RECORD)
    sinks.write(RECORD)
    assert good.n == 2 and len(sinks.sinks) == 1
    assert MetricSinks.from_config(SinksConfig(), None, "x").sinks == []
