"""dltools.exercises: the time limit every check puts on a learner's code
(call_with_time_limit), and what a check does while a notebook is graded (report)."""
import signal
import threading
import time

import pytest

from dltools.exercises import (
    GRADING_ENV,
    NotCorrect,
    TimeLimitExceeded,
    call_with_time_limit,
    report,
)


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


SWALLOWS = """
import time
from dltools.exercises import call_with_time_limit

def swallows():
    while True:
        try:
            {body}
        except:   # noqa: E722 -- the learner's bare except, which catches KeyboardInterrupt
            pass

call_with_time_limit(0.5, swallows)
"""


def test_a_function_that_catches_the_interrupt_is_named_or_stopped():
    """Sweep 3 (X4, X7): a bare ``except:`` swallows the limit's interrupt, as it does the stop
    button's. In a pure-Python loop the next interrupt lands outside its ``try`` and the limit
    holds; in one that sleeps, nothing in the process can stop it, and the learner is told why
    and what to do."""
    import subprocess
    import sys
    stopped = subprocess.run([sys.executable, "-c", SWALLOWS.format(body="x = 1")],
                             capture_output=True, text=True, timeout=60)
    assert "TimeLimitExceeded: your function did not return within 0.5 s" in stopped.stderr
    with pytest.raises(subprocess.TimeoutExpired) as running:
        subprocess.run([sys.executable, "-c", SWALLOWS.format(body="time.sleep(0.05)")],
                       capture_output=True, text=True, timeout=8)
    said = running.value.stderr.decode() if running.value.stderr else ""
    assert "it catches KeyboardInterrupt, probably with a bare 'except:'" in said
    assert "Restart the kernel" in said


@pytest.mark.parametrize("ok, answer, says", [
    (False, 3, "Not yet: try again"),
    (None, None, "Not answered yet: replace None with your answer."),
    (False, None, "Not answered yet: replace None with your answer."),
])
def test_while_grading_an_answer_that_is_not_right_raises_after_its_sentence(
        capsys, monkeypatch, ok, answer, says):
    monkeypatch.setenv(GRADING_ENV, "1")
    with pytest.raises(NotCorrect, match=says):
        report(ok, "well done", "try again", answer)
    assert capsys.readouterr().out == says + "\n"
    assert report(True, "well done", "try again", 3) == True   # noqa: E712 (a Verdict)
    monkeypatch.delenv(GRADING_ENV)
    assert report(ok, "well done", "try again", answer) == False   # noqa: E712


def _numeric_checks():
    import checks_00
    import checks_02
    import checks_03
    import checks_04
    import checks_05
    return [(checks_00.check_batches_per_epoch, 118), (checks_00.check_test_images_per_class, 1000),
            (checks_02.check_global_batch_mean, 2.2), (checks_03.check_ring_bytes_per_rank, 175),
            (checks_03.check_per_rank_batch, 24), (checks_03.check_shard_without_set_epoch, 24),
            (checks_04.check_steps_in_ten_epochs, 1570), (checks_04.check_scaled_lr, 0.4),
            (checks_04.check_bn_rows_per_replica, 100), (checks_05.check_zero_memory, 37.375),
            (checks_05.check_tp_all_reduces, 24), (checks_05.check_bubble, 0.2)]


@pytest.mark.parametrize("index", range(12))
def test_every_number_check_takes_a_tensor_and_survives_odd_numbers(capsys, index):
    """Sweep 3: notebook 00's hint says to count with torch.bincount, whose right count (a 0-d
    tensor) was refused as "not an int" (T5); 10 ** 400 crashed two checks with OverflowError
    (T6, T7); nan and inf got the method's hint, not what went wrong (T8)."""
    import torch
    check, right = _numeric_checks()[index]
    as_tensor = torch.tensor(right)
    assert check(as_tensor), capsys.readouterr().out
    assert capsys.readouterr().out.startswith("Correct:")
    for odd in (10 ** 400, -10 ** 400):
        assert not check(odd)
        assert capsys.readouterr().out.startswith("Not yet:")
    for odd in (float("nan"), float("inf"), torch.tensor(float("nan"))):
        assert not check(odd)
        said = capsys.readouterr().out
        assert "not a number you can compare" in said or "a whole number (an int)" in said, said
