import pytest
from swefleet.inference.idle import IdleClock

pytestmark = pytest.mark.unit


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_idle_fraction_counts_only_time_without_requests():
    clock = FakeClock()
    idle = IdleClock(clock)
    clock.t = 2.0          # idle 0..2
    idle.started()
    clock.t = 3.0
    idle.started()         # overlapping requests: still one busy span
    clock.t = 5.0
    idle.finished()
    clock.t = 6.0
    idle.finished()        # busy 2..6
    clock.t = 10.0         # idle 6..10
    assert idle.take() == pytest.approx(6.0 / 10.0)


def test_each_take_starts_a_new_window():
    clock = FakeClock()
    idle = IdleClock(clock)
    idle.started()
    clock.t = 4.0
    assert idle.take() == 0.0          # busy the whole window
    clock.t = 6.0
    idle.finished()
    clock.t = 8.0
    assert idle.take() == pytest.approx(0.5)   # window 4..8, idle 6..8
    clock.t = 9.0
    assert idle.take() == pytest.approx(1.0)   # nothing in flight at all


def test_unmatched_finish_is_an_error():
    with pytest.raises(RuntimeError, match="without a matching"):
        IdleClock().finished()
