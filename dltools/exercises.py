"""Check functions for the notebooks' exercises.

Each ``check_*`` takes the learner's answer, prints whether it is right (with a hint when it is not)
and returns True/False. ``None`` means "not answered yet". Sections follow the notebooks; each
notebook adds its own section below.
"""
import math

import torch

__all__ = ["report"]


def report(ok, right, hint, answer=None):
    """Print the verdict on an answer and return it as a bool.

    >>> report(True, 'well done', 'try again')
    Correct: well done
    True
    >>> report(False, 'well done', 'try again', answer=None)
    Not answered yet: replace None with your answer.
    False
    """
    if ok is None or (answer is None and not ok):
        print("Not answered yet: replace None with your answer.")
        return False
    print(f"Correct: {right}" if ok else f"Not yet: {hint}")
    return bool(ok)


def _same_shape(answer, expected):
    try:
        return tuple(answer) == tuple(expected)
    except TypeError:
        return False


# ------------------------------------------------------------------ 00 getting started


def check_batches_per_epoch(answer, num_examples=60000, batch_size=256):
    """How many batches does one pass over ``num_examples`` take at ``batch_size``?

    >>> check_batches_per_epoch(235)
    Correct: 60,000 / 256 = 234.4, and the last, smaller batch counts too: 235.
    True
    >>> check_batches_per_epoch(234)
    Not yet: the last batch is smaller than the others but still a batch (round up).
    False
    """
    expected = math.ceil(num_examples / batch_size)
    return report(answer == expected,
                  f"{num_examples:,} / {batch_size} = {num_examples / batch_size:.1f}, and the last, "
                  f"smaller batch counts too: {expected}.",
                  "the last batch is smaller than the others but still a batch (round up).", answer)


def check_label_index(answer, name="sneaker"):
    """Which class index does Fashion-MNIST use for ``name``?

    >>> check_label_index(7)
    Correct: index 7 is 'sneaker'.
    True
    """
    from .data import FASHION_MNIST_LABELS
    expected = FASHION_MNIST_LABELS.index(name)
    return report(answer == expected, f"index {expected} is {name!r}.",
                  "look at dltools.get_fashion_mnist_labels(range(10)).", answer)


def check_resized_batch_shape(answer, batch_size=256, resize=64):
    """Shape of the first training batch with ``load_data_fashion_mnist(batch_size, resize=resize)``.

    >>> check_resized_batch_shape((256, 1, 64, 64))
    Correct: (batch, channels, height, width) = (256, 1, 64, 64).
    True
    >>> check_resized_batch_shape(torch.Size([256, 64, 64]))
    Not yet: images keep a channel dimension (grayscale: 1) between batch and height.
    False
    """
    expected = (batch_size, 1, resize, resize)
    return report(_same_shape(answer, expected) if answer is not None else None,
                  f"(batch, channels, height, width) = {expected}.",
                  "images keep a channel dimension (grayscale: 1) between batch and height.", answer)
