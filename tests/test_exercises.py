"""dltools.exercises.call_with_time_limit: the time limit every check puts on a learner's code."""
import signal
import threading
import time

import pytest

from dltools.exercises import TimeLimitExceeded, call_with_time_limit


def test_a_function_within_the_limit_returns_its_value_and_leaves_no_interrupt_behind():
    handler = signal.getsignal(signal.SIGINT)
    assert call_with_time_limit(5, lambda a, b: a + b, 2, 3) == 5
    time.sleep(0.2)   # a stray interrupt would be raised here
    assert signal.getsignal(signal.SIGINT) is handler
    assert not [t for t in threading.enumerate() if isinstance(t, threading.Timer)]


def test_a_loop_is_stopped_and_the_handler_put_back():
    handler = signal.getsignal(signal.SIGINT)
    start = time.monotonic()

    def forever():
        while True:
            pass

    with pytest.raises(TimeLimitExceeded, match="did not return within 0.5 s"):
        call_with_time_limit(0.5, forever)
    assert time.monotonic() - start < 60   # not a timing claim: only "it was stopped"
    assert signal.getsignal(signal.SIGINT) is handler


def test_the_learners_own_stop_stays_a_keyboard_interrupt():
    def pressed_stop():
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as info:
        call_with_time_limit(5, pressed_stop)
    assert not isinstance(info.value, TimeoutError)


def test_the_learners_own_timeout_error_is_not_taken_for_the_limit():
    def raises_timeout():
        raise TimeoutError("mine")

    with pytest.raises(TimeoutError, match="mine") as info:
        call_with_time_limit(5, raises_timeout)
    assert not isinstance(info.value, TimeLimitExceeded)


def test_a_function_that_ends_as_the_limit_fires_does_not_leak_the_interrupt():
    # Many calls that end near the limit: none may leave a KeyboardInterrupt to a later line.
    for _ in range(20):
        try:
            call_with_time_limit(0.01, time.sleep, 0.01)
        except TimeLimitExceeded:
            pass
        time.sleep(0.05)   # a leaked interrupt would be raised here, failing the test


def test_a_sleep_is_stopped():
    with pytest.raises(TimeLimitExceeded):
        call_with_time_limit(0.5, time.sleep, 3600)
