"""Checks for the exercises of notebook 00 (getting started).

Each check prints whether the answer is right, with a hint when it is not, and returns a Verdict;
``None`` means "not answered yet". Expected values are worked out inside the functions, so that
Jupyter's help (Shift-Tab) does not show them.
"""
import math

import torch

from dltools.data import FASHION_MNIST_LABELS
from dltools.exercises import int_tuple, is_int, plain, report

_TRAIN_IMAGES, _TEST_IMAGES, _EPOCH_BATCH, _BATCH, _RESIZE = 60000, 10000, 512, 256, 64


def check_batches_per_epoch(answer):
    """Exercise 1: batches in one epoch over the training images."""
    answer = plain(answer)
    expected = math.ceil(_TRAIN_IMAGES / _EPOCH_BATCH)
    if answer is not None and not is_int(answer):
        hint = ("a number of batches is a whole number (an int)" +
                (", not a float." if isinstance(answer, float) else "."))
    elif answer == _TRAIN_IMAGES // _EPOCH_BATCH:
        hint = "the last batch is smaller than the others but still a batch (round up)."
    else:
        hint = "divide the number of images by the batch size, and count a partial batch too."
    ok = None if answer is None else is_int(answer) and answer == expected
    return report(ok, f"{_TRAIN_IMAGES:,} / {_EPOCH_BATCH} = {_TRAIN_IMAGES / _EPOCH_BATCH:.1f}, "
                  f"and the last, smaller batch counts too: {expected}.", hint, answer)


def check_test_images_per_class(answer):
    """Exercise 2: how many test images each class has."""
    answer = plain(answer)
    expected = _TEST_IMAGES // len(FASHION_MNIST_LABELS)
    if isinstance(answer, torch.Tensor) and answer.numel() > 1:
        hint = (f"that is a tensor of {answer.numel()} numbers, one per class: give the one "
                "number each class has (for example counts[0].item()).")
    elif answer is not None and not is_int(answer):
        hint = ("a number of images is a whole number (an int)" +
                (", not a float." if isinstance(answer, float) else "."))
    elif answer == _TRAIN_IMAGES // len(FASHION_MNIST_LABELS):
        hint = "that is the training set's count per class; the question is about the test set."
    elif answer == _TEST_IMAGES:
        hint = "that is every test image; count those of one class (torch.bincount counts each)."
    else:
        hint = "count the labels of the whole test set with torch.bincount: are the classes even?"
    ok = None if answer is None else is_int(answer) and answer == expected
    return report(ok, f"{expected} each: the {_TEST_IMAGES:,} test images are spread evenly over "
                  f"the {len(FASHION_MNIST_LABELS)} classes, so chance accuracy is 10%.", hint,
                  answer)


def check_resized_batch_shape(answer):
    """Exercise 3: the shape of the first resized training batch."""
    expected = (_BATCH, 1, _RESIZE, _RESIZE)
    got = int_tuple(answer)
    if answer is not None and got is None:
        hint = "give the shape as a tuple of whole numbers, e.g. (2, 3, 4)."
    elif got is not None and len(got) == 3 and got[0] == _BATCH:
        hint = "images keep a channel dimension (grayscale: 1) between batch and height."
    elif got is not None and len(got) == 3:
        hint = "that is one image; a batch has the batch size in front."
    else:
        hint = "(batch, channels, height, width): which of them does resize change?"
    return report(None if answer is None else got == expected,
                  f"(batch, channels, height, width) = {expected}.", hint, answer)
