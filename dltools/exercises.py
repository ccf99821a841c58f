"""Shared feedback helpers for the notebooks' exercise checks.

Each notebook's checks live next to it, in ``notebooks/checks_NN.py``; they use the helpers here to
print the verdict and to read answers strictly (``3.9`` is not an int, ``True`` is not a number).
A check takes the learner's answer, prints whether it is right (with a hint when it is not) and
returns a :class:`Verdict`, true or false, that a notebook does not display; ``None`` as the answer
means "not answered yet".
"""
import _thread
import math
import numbers
import os
import signal
import sys
import threading
import time

import torch

__all__ = ["Verdict", "report", "NotCorrect", "GRADING_ENV",
           "is_int", "is_real", "int_list", "real_list", "int_tuple",
           "close_enough", "plain", "as_float",
           "call_with_time_limit", "TimeLimitExceeded"]


class Verdict:
    """What a check returns: true when the answer is right.

    The check has already printed its sentence, so in a notebook the verdict itself shows nothing
    (no bare ``True`` or ``False`` under the cell); in code it is true or false, and equals the
    bool.

    >>> bool(Verdict(True)), Verdict(False) == False, Verdict(True)
    (True, True, Verdict(True))
    """
    __slots__ = ("ok",)

    def __init__(self, ok):
        self.ok = bool(ok)

    def __bool__(self):
        return self.ok

    def __eq__(self, other):
        return self.ok == other if isinstance(other, (bool, Verdict)) else NotImplemented

    def __hash__(self):
        return hash(self.ok)

    def __repr__(self):
        return f"Verdict({self.ok})"

    def _ipython_display_(self):
        """IPython and Jupyter show nothing for it: the sentence printed above is the answer."""


#: Set by ``course.py grade`` (tools/grade.py) in the kernel that runs a handed-in notebook.
GRADING_ENV = "DP_COURSE_GRADING"


class NotCorrect(AssertionError):
    """Raised by a check, while grading only, when the answer is not right: nbgrader gives an
    exercise its points when its check cell raises nothing."""


def report(ok, right, hint, answer=None):
    """Print the verdict on an answer and return it (a :class:`Verdict`, true when right).

    While grading (``DP_COURSE_GRADING=1``), an answer that is not right also raises
    :class:`NotCorrect`, after the same sentence.

    >>> report(True, 'well done', 'try again')
    Correct: well done
    Verdict(True)
    >>> report(False, 'well done', 'try again', answer=None)
    Not answered yet: replace None with your answer.
    Verdict(False)
    >>> report(False, 'well done', 'try again', answer=3)
    Not yet: try again
    Verdict(False)
    """
    if ok is None or (answer is None and not ok):
        said, ok = "Not answered yet: replace None with your answer.", False
    elif not ok and is_real(answer) and not isinstance(answer, numbers.Integral) \
            and not math.isfinite(answer):
        said = (f"Not yet: your answer is {answer}, not a number you can compare: a step of the "
                "computation went wrong (a division by 0, 0 / 0, or a value too large).")
    else:
        said = f"Correct: {right}" if ok else f"Not yet: {hint}"
    print(said)
    if not ok and os.environ.get(GRADING_ENV):
        raise NotCorrect(said)
    return Verdict(ok)


def is_int(value):
    """True for a whole number given as an int (numpy and torch ints too), not a bool or a float.

    >>> import torch
    >>> is_int(3), is_int(3.0), is_int(True), is_int(torch.tensor(3).item())
    (True, False, False, True)
    """
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value):
    """True for a real number (an int or a float, numpy's and torch's too), not a bool or a string.

    >>> is_real(0.5), is_real(2), is_real(True), is_real("0.5")
    (True, True, False, False)
    """
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _sequence(answer):
    """``answer`` as a list when it is a list, a tuple (``torch.Size`` is one) or a 1-D tensor;
    else None (a set or a dict has no order, a string is not a list of numbers)."""
    if isinstance(answer, torch.Tensor):
        return answer.tolist() if answer.dim() == 1 else None
    return list(answer) if isinstance(answer, (list, tuple)) else None


def int_list(answer):
    """``answer`` as a list of ints, or None when it is not a sequence of whole numbers.

    >>> int_list((1, 2)), int_list(torch.Size([4, 2])), int_list([3.9]), int_list(7), int_list({3})
    ([1, 2], [4, 2], None, None, None)
    """
    values = _sequence(answer)
    if values is None or not all(is_int(v) for v in values):
        return None
    return [int(v) for v in values]


def real_list(answer):
    """``answer`` as a list of floats, or None when it is not a sequence of real numbers.

    >>> real_list([0.5, 1]), real_list(torch.tensor([0.5, 0.25])), real_list(["0.5"])
    ([0.5, 1.0], [0.5, 0.25], None)
    """
    values = _sequence(answer)
    if values is None or not all(is_real(v) for v in values):
        return None
    return [float(v) for v in values]


def int_tuple(answer):
    """``answer`` as a tuple of ints (a shape), or None; a bare int ``n`` is not the shape ``(n,)``.

    >>> import torch
    >>> int_tuple((3,)), int_tuple(torch.Size([3])), int_tuple((3.9,)), int_tuple(3)
    ((3,), (3,), None, None)
    """
    values = int_list(answer)
    return None if values is None else tuple(values)


def plain(answer):
    """A one-element tensor as the Python number it holds (``torch.bincount(y)[0]`` is an answer
    too); anything else as it is.

    >>> import torch
    >>> plain(torch.tensor(1000)), plain(torch.tensor([0.5])), plain([3]), plain(torch.tensor(True))
    (1000, 0.5, [3], tensor(True))
    """
    if isinstance(answer, torch.Tensor) and answer.numel() == 1 and answer.dtype != torch.bool:
        return answer.item()
    return answer


def as_float(value):
    """``float(value)`` for a real number, with an int too large for a float as +-inf (a wrong
    answer, not a check that crashes).

    >>> as_float(3), as_float(-10 ** 400)
    (3.0, -inf)
    """
    try:
        return float(value)
    except OverflowError:
        return math.inf if value > 0 else -math.inf


def close_enough(answer, expected, rel=0.01):
    """True when ``answer`` is a real number (not a bool or a string) within ``rel`` of
    ``expected``.

    >>> close_enough(0.2004, 0.2), close_enough('0.2', 0.2), close_enough(True, 1)
    (True, False, False)
    """
    if isinstance(answer, (bool, str, bytes)) or not isinstance(answer, numbers.Real):
        return False
    return abs(as_float(answer) - expected) <= rel * abs(expected)



class TimeLimitExceeded(TimeoutError):
    """A learner's function ran past the check's time limit (and was stopped)."""


def call_with_time_limit(seconds, fn, *args):
    """``fn(*args)``, stopped after ``seconds`` with a ``TimeoutError`` that says so.

    A check that runs a learner's function must end even when the function loops forever. The
    limit interrupts the main thread as the kernel's stop button does (a ``KeyboardInterrupt``,
    here turned into ``TimeoutError``). A pure-Python loop stops at once, and so does a
    ``time.sleep`` (on Windows, when the sleep ends); a long native operation stops when it
    returns. A function that catches the interrupt (a bare ``except:``) is interrupted again every
    half second, and told once why it still runs. Off the main thread there is no limit.

    >>> call_with_time_limit(5, sum, [1, 2])
    3
    >>> call_with_time_limit(0.2, time.sleep, 60)
    Traceback (most recent call last):
    ...
    dltools.exercises.TimeLimitExceeded: your function did not return within 0.2 s: it may loop \
forever or wait for something that never comes.
    """
    if threading.current_thread() is not threading.main_thread():
        return fn(*args)
    lock, state = threading.Lock(), {"done": False, "fired": False, "delivered": 0}
    ended = threading.Event()
    main = threading.main_thread().ident

    def interrupted(signum, frame):   # Python's own handler, counting
        state["delivered"] += 1
        raise KeyboardInterrupt

    def fire():
        warned = False
        while True:
            with lock:
                if state["done"]:
                    return
                state["fired"] = True
                if hasattr(signal, "pthread_kill"):   # a real signal: it wakes a sleep too
                    signal.pthread_kill(main, signal.SIGINT)
                else:   # Windows: the flag the stop button sets
                    _thread.interrupt_main()
            if state["delivered"] >= 2 and not warned:
                # Two interrupts reached the function (a long native call sees none until it
                # returns) and it runs on: a bare ``except:`` (or ``except BaseException``) caught
                # them, and nothing in this process can stop it. Say so, and keep trying (an
                # interrupt that lands outside its ``try`` ends it).
                warned = True
                print(f"Your function did not stop when the check's {seconds:g} s limit "
                      "interrupted it: it catches KeyboardInterrupt, probably with a bare "
                      "'except:', which the stop button cannot get past either. Restart the "
                      "kernel, then catch only the errors you expect ('except ValueError:').",
                      file=sys.stderr, flush=True)
            if ended.wait(0.5):
                return

    saved = signal.signal(signal.SIGINT, interrupted)
    timer = threading.Timer(seconds, fire)
    timer.daemon = True
    try:
        try:
            timer.start()
            try:
                return fn(*args)
            finally:
                with lock:
                    state["done"] = True
                ended.set()
                timer.cancel()
                if state["fired"]:
                    _absorb_interrupt()
        except KeyboardInterrupt:
            if not state["fired"]:
                raise  # the learner pressed stop
            message = (f"your function did not return within {seconds:g} s: it may loop forever "
                       "or wait for something that never comes.")
            raise TimeLimitExceeded(message) from None
    finally:
        signal.signal(signal.SIGINT, saved)


def _absorb_interrupt():
    """The limit fired as the function returned: take the interrupt it sent, which is pending."""
    try:
        for _ in range(100):
            time.sleep(0.001)
    except KeyboardInterrupt:
        pass
