"""Shared feedback helpers for the notebooks' exercise checks.

Each notebook's checks live next to it, in ``notebooks/checks_NN.py``; they use the helpers here to
print the verdict and to read answers strictly (``3.9`` is not an int, ``True`` is not a number).
A check takes the learner's answer, prints whether it is right (with a hint when it is not) and
returns True/False; ``None`` means "not answered yet".
"""
import numbers

__all__ = ["report", "is_int", "int_list", "int_tuple", "close_enough"]


def report(ok, right, hint, answer=None):
    """Print the verdict on an answer and return it as a bool.

    >>> report(True, 'well done', 'try again')
    Correct: well done
    True
    >>> report(False, 'well done', 'try again', answer=None)
    Not answered yet: replace None with your answer.
    False
    >>> report(False, 'well done', 'try again', answer=3)
    Not yet: try again
    False
    """
    if ok is None or (answer is None and not ok):
        print("Not answered yet: replace None with your answer.")
        return False
    print(f"Correct: {right}" if ok else f"Not yet: {hint}")
    return bool(ok)


def is_int(value):
    """True for a whole number given as an int (numpy and torch ints too), not a bool or a float.

    >>> import torch
    >>> is_int(3), is_int(3.0), is_int(True), is_int(torch.tensor(3).item())
    (True, False, False, True)
    """
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def int_list(answer):
    """``answer`` as a list of ints, or None when it is not a sequence of whole numbers.

    >>> import torch
    >>> int_list((1, 2)), int_list(torch.Size([4, 2])), int_list([3.9]), int_list(7)
    ([1, 2], [4, 2], None, None)
    """
    if isinstance(answer, (str, bytes)):
        return None
    try:
        values = list(answer)
    except TypeError:
        return None
    if not all(is_int(v) for v in values):
        return None
    return [int(v) for v in values]


def int_tuple(answer):
    """``answer`` as a tuple of ints (a shape), or None; a bare int ``n`` is not the shape ``(n,)``.

    >>> import torch
    >>> int_tuple((3,)), int_tuple(torch.Size([3])), int_tuple((3.9,)), int_tuple(3)
    ((3,), (3,), None, None)
    """
    values = int_list(answer)
    return None if values is None else tuple(values)


def close_enough(answer, expected, rel=0.01):
    """True when ``answer`` is a real number (not a bool or a string) within ``rel`` of
    ``expected``.

    >>> close_enough(0.2004, 0.2), close_enough('0.2', 0.2), close_enough(True, 1)
    (True, False, False)
    """
    if isinstance(answer, (bool, str, bytes)) or not isinstance(answer, numbers.Real):
        return False
    return abs(float(answer) - expected) <= rel * abs(expected)

