"""Shared feedback helpers for the notebooks' exercise checks.

Each notebook's checks live next to it, in ``notebooks/checks_NN.py``; they use the helpers here to
print the verdict and to read answers strictly (``3.9`` is not an int, ``True`` is not a number).
A check takes the learner's answer, prints whether it is right (with a hint when it is not) and
returns True/False; ``None`` means "not answered yet".

(Notebooks 03 and 04 still call their old checks below until their owners move them.)
"""
import math
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
    """True when ``answer`` is a real number (not a bool or a string) within ``rel`` of ``expected``.

    >>> close_enough(0.2004, 0.2), close_enough('0.2', 0.2), close_enough(True, 1)
    (True, False, False)
    """
    if isinstance(answer, (bool, str, bytes)) or not isinstance(answer, numbers.Real):
        return False
    return abs(float(answer) - expected) <= rel * abs(expected)


# ------------------------------------------------------------------ 04 ResNet-18 across devices


def check_steps_in_ten_epochs(answer, num_examples=60000, batch_size=512, num_epochs=10):
    """Optimizer steps in ``num_epochs`` epochs over ``num_examples`` images at global ``batch_size``
    (the seed's 2-GPU run).

    >>> check_steps_in_ten_epochs(1180)
    Correct: ceil(60000 / 512) = 118 steps per epoch, 1180 in 10 epochs (the 1-GPU run at batch 256 takes 2350).
    True
    >>> check_steps_in_ten_epochs(2350)
    Not yet: that is the 1-GPU run at batch 256; doubling the batch halves the steps.
    False
    """
    per_epoch = math.ceil(num_examples / batch_size)
    expected = per_epoch * num_epochs
    half = math.ceil(num_examples / (batch_size // 2)) * num_epochs
    hint = ("that is the 1-GPU run at batch 256; doubling the batch halves the steps." if answer == half
            else "one step per batch; count the last, smaller batch too, then multiply by the epochs.")
    return report(answer == expected,
                  f"ceil({num_examples} / {batch_size}) = {per_epoch} steps per epoch, {expected} in "
                  f"{num_epochs} epochs (the 1-GPU run at batch {batch_size // 2} takes {half}).",
                  hint, answer)


def check_scaled_lr(answer, base_lr=0.1, base_batch=256, batch_size=1024):
    """Learning rate for ``batch_size`` by the linear-scaling rule from ``base_lr`` at ``base_batch``.

    >>> check_scaled_lr(0.4)
    Correct: 0.1 x 1024 / 256 = 0.4 (reached gradually, with a warm-up).
    True
    >>> check_scaled_lr(0.2)
    Not yet: the rule multiplies the learning rate by the factor the batch grew by (1024 / 256 = 4).
    False
    """
    expected = base_lr * batch_size / base_batch
    try:
        ok = answer is not None and math.isclose(float(answer), expected, rel_tol=1e-6)
    except (TypeError, ValueError):
        ok = False
    return report(ok, f"{base_lr} x {batch_size} / {base_batch} = {expected:g} (reached gradually, "
                  "with a warm-up).",
                  f"the rule multiplies the learning rate by the factor the batch grew by "
                  f"({batch_size} / {base_batch} = {batch_size // base_batch}).", answer)


def check_bn_rows_per_replica(answer, batch_size=512, num_devices=4):
    """Rows each BatchNorm layer normalises over in training mode, for a global batch of
    ``batch_size`` under DataParallel on ``num_devices`` GPUs.

    >>> check_bn_rows_per_replica(128)
    Correct: every replica normalises its own chunk: chunk_sizes(512, 4) = [128, 128, 128, 128].
    True
    >>> check_bn_rows_per_replica(512)
    Not yet: BatchNorm runs inside each replica's forward and sees only that replica's rows.
    False
    """
    from .parallel import chunk_sizes
    sizes = chunk_sizes(batch_size, num_devices)
    return report(answer == sizes[0] and len(set(sizes)) == 1,
                  f"every replica normalises its own chunk: chunk_sizes({batch_size}, {num_devices}) "
                  f"= {sizes}.",
                  "BatchNorm runs inside each replica's forward and sees only that replica's rows.",
                  answer)


def check_reinit_keeps(answer):
    """Which parameter kind does ``net.apply(init_weights_normal)`` leave as it was in
    ``dltools.resnet18``: 'conv weight', 'linear weight' or 'batchnorm weight'?

    >>> check_reinit_keeps('batchnorm weight')
    Correct: init_weights_normal only touches Linear and Conv2d weights; BatchNorm's weight, bias and running statistics (and every bias) keep their values.
    True
    >>> check_reinit_keeps('conv weight')
    Not yet: read the isinstance test in inspect.getsource(dltools.init_weights_normal).
    False
    """
    choices = ("conv weight", "linear weight", "batchnorm weight")
    if answer is not None and answer not in choices:
        return report(False, "", f"answer with one of {choices}.", answer)
    return report(answer == "batchnorm weight",
                  "init_weights_normal only touches Linear and Conv2d weights; BatchNorm's weight, "
                  "bias and running statistics (and every bias) keep their values.",
                  "read the isinstance test in inspect.getsource(dltools.init_weights_normal).", answer)


# ------------------------------------------------------------------ 03 from DataParallel to DDP


def check_ring_bytes_per_rank(answer, gradient_mb=100, world_size=8):
    """MB each rank sends in a ring all-reduce of ``gradient_mb`` MB of gradients over ``world_size`` ranks.

    >>> check_ring_bytes_per_rank(175)
    Correct: 2 (N - 1) / N x size = 2 x 7 / 8 x 100 MB = 175 MB, less than twice the gradients whatever N is.
    True
    >>> check_ring_bytes_per_rank(1400)
    Not yet: that is what rank 0 handles in the naive all-reduce. In the ring, each rank sends 2 (N - 1) chunks of size / N.
    False
    """
    n = world_size
    expected = 2 * (n - 1) / n * gradient_mb
    naive = 2 * (n - 1) * gradient_mb
    ok = None if answer is None else _close_enough(answer, expected)
    hint = ("that is what rank 0 handles in the naive all-reduce. " if _close_enough(answer, naive) else "") + \
        "In the ring, each rank sends 2 (N - 1) chunks of size / N."
    return report(ok, f"2 (N - 1) / N x size = 2 x {n - 1} / {n} x {gradient_mb} MB = {expected:g} MB, "
                  "less than twice the gradients whatever N is.", hint, answer)


def check_per_rank_batch(answer, global_batch=96, world_size=4):
    """Batch size each process of ``scripts/train_ddp.py`` uses for ``--batch-size global_batch``.

    >>> check_per_rank_batch(24)
    Correct: the script splits the global batch: 96 / 4 = 24 examples per process and step.
    True
    >>> check_per_rank_batch(96)
    Not yet: --batch-size is the global batch; look at the DataLoader in scripts/train_ddp.py.
    False
    """
    expected = global_batch // world_size
    return report(None if answer is None else answer == expected,
                  f"the script splits the global batch: {global_batch} / {world_size} = {expected} "
                  "examples per process and step.",
                  "--batch-size is the global batch; look at the DataLoader in scripts/train_ddp.py.",
                  answer)


def check_without_set_epoch(answer):
    """What happens if ``sampler.set_epoch(epoch)`` is left out? (a letter)

    a) every rank gets the whole data set; b) every epoch visits the examples in the same order;
    c) the ranks get overlapping shards; d) training fails with an error.

    >>> check_without_set_epoch('b')
    Correct: the shuffle is seeded with seed + epoch, and epoch stays 0: the same order every epoch (the shards stay disjoint).
    True
    >>> check_without_set_epoch('c')
    Not yet: every rank seeds the same permutation and keeps every N-th index, so the shards never overlap. What does the epoch change?
    False
    """
    letter = answer.strip().lower()[:1] if isinstance(answer, str) else answer
    return report(None if answer is None else letter == "b",
                  "the shuffle is seeded with seed + epoch, and epoch stays 0: the same order every "
                  "epoch (the shards stay disjoint).",
                  "every rank seeds the same permutation and keeps every N-th index, so the shards "
                  "never overlap. What does the epoch change?", answer)


_close_enough = close_enough  # the old name, for the 03/04 checks above
