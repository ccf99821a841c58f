"""Checks for the exercises of notebook 00 (getting started).

Each check prints whether the answer is right, with a hint when it is not, and returns a Verdict;
``None`` means "not answered yet". Expected values are worked out inside the functions, so that
Jupyter's help (Shift-Tab) does not show them.
"""
import math

from dltools.data import FASHION_MNIST_LABELS
from dltools.exercises import int_tuple, is_int, report

_TRAIN_IMAGES, _EPOCH_BATCH, _BATCH, _RESIZE, _CLASS_NAME = 60000, 512, 256, 64, "sneaker"


def check_batches_per_epoch(answer):
    """Exercise 1: batches in one epoch over the training images."""
    expected = math.ceil(_TRAIN_IMAGES / _EPOCH_BATCH)
    if answer is not None and not is_int(answer):
        hint = "a number of batches is a whole number (an int, not a float)."
    elif answer == _TRAIN_IMAGES // _EPOCH_BATCH:
        hint = "the last batch is smaller than the others but still a batch (round up)."
    else:
        hint = "divide the number of images by the batch size, and count a partial batch too."
    ok = None if answer is None else is_int(answer) and answer == expected
    return report(ok, f"{_TRAIN_IMAGES:,} / {_EPOCH_BATCH} = {_TRAIN_IMAGES / _EPOCH_BATCH:.1f}, "
                  f"and the last, smaller batch counts too: {expected}.", hint, answer)


def check_label_index(answer):
    """Exercise 2: the class index of the class named in the exercise."""
    expected = FASHION_MNIST_LABELS.index(_CLASS_NAME)
    ok = None if answer is None else is_int(answer) and answer == expected
    return report(ok, f"index {expected} is {_CLASS_NAME!r}.",
                  "look at dltools.get_fashion_mnist_labels(range(10)) (indices start at 0).",
                  answer)


def check_resized_batch_shape(answer):
    """Exercise 3: the shape of the first resized training batch."""
    expected = (_BATCH, 1, _RESIZE, _RESIZE)
    got = int_tuple(answer)
    if answer is not None and got is None:
        hint = "give the shape as a tuple of whole numbers, e.g. (2, 3, 4)."
    elif got is not None and len(got) == 3:
        hint = "images keep a channel dimension (grayscale: 1) between batch and height."
    else:
        hint = "(batch, channels, height, width): which of them does resize change?"
    return report(None if answer is None else got == expected,
                  f"(batch, channels, height, width) = {expected}.", hint, answer)
