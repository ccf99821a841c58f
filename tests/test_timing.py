import time

import pytest
import torch

import dltools


def test_timer_measures_elapsed_time():
    timer = dltools.Timer()
    time.sleep(0.01)
    t = timer.stop()
    assert t >= 0.009
    assert timer.times == [t]


def test_timer_statistics_match_d2l_semantics():
    timer = dltools.Timer()
    timer.times = [0.5, 1.5, 1.0]
    assert timer.avg() == pytest.approx(1.0)
    assert timer.sum() == pytest.approx(3.0)
    assert timer.cumsum() == pytest.approx([0.5, 2.0, 3.0])


def test_timer_avg_of_nothing_is_an_error_not_zero():
    timer = dltools.Timer()
    with pytest.raises(RuntimeError, match="no time recorded yet"):
        timer.avg()
    timer.stop()
    assert timer.avg() == timer.times[0]


def test_timer_context_manager_records_one_time():
    with dltools.Timer() as timer:
        time.sleep(0.005)
    assert len(timer.times) == 1 and timer.times[0] >= 0.004


def test_accumulator_adds_resets_and_indexes():
    acc = dltools.Accumulator(2)
    acc.add(1, 2)
    acc.add(3, 4.5)
    assert (acc[0], acc[1]) == (4.0, 6.5)
    assert len(acc) == 2
    acc.reset()
    assert acc.data == [0.0, 0.0]


@pytest.mark.parametrize("n", [0, -1, 2.0, True])
def test_accumulator_rejects_bad_size(n):
    with pytest.raises(ValueError, match="positive number"):
        dltools.Accumulator(n)


def test_accumulator_rejects_wrong_number_of_values():
    acc = dltools.Accumulator(3)
    with pytest.raises(ValueError, match="holds 3 variables, add\\(\\) got 2"):
        acc.add(1, 2)


def test_timer_waits_for_every_gpu(monkeypatch):
    """DataParallel queues work on several GPUs: a timer must wait for all of them (faked CUDA)."""
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    timer = dltools.Timer()
    timer.stop()
    assert calls == [0, 1, 0, 1]
